"""The agent's view of every corpus notebook, compared with the stored golden files.

Each notebook in ``notebooks/`` is read through the canonical tools by a real MCP client (in
process): ``read_notebook`` as an overview and in full. What the agent gets (the structured
result, plus the kind and size of every content block) must equal ``golden/<name>.<view>.json``.

A change in what agents see shows as a diff of the golden files. To accept one, regenerate them
and review the diff before committing::

    NBRELAY_UPDATE_GOLDEN=1 python -m pytest tests/corpus

To add a notebook, put it in ``notebooks/`` (``make_notebooks.py`` makes the current ones) and
regenerate.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, ImageContent, TextContent

from nbrelay.config import Settings
from nbrelay.server import build_server

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent
NOTEBOOKS = sorted(p.name for p in (HERE / "notebooks").glob("*.ipynb"))
VIEWS = {"overview": {}, "full": {"full": True}}
UPDATE = os.environ.get("NBRELAY_UPDATE_GOLDEN") == "1"


def agent_view(result: CallToolResult) -> dict[str, Any]:
    """What an agent receives: the structured result, and each content block's kind and size."""
    blocks: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, TextContent):
            blocks.append({"type": "text", "chars": len(block.text)})
        elif isinstance(block, ImageContent):
            blocks.append({"type": "image", "mime": block.mime_type, "chars": len(block.data)})
        else:
            blocks.append({"type": block.type})
    return {"is_error": result.is_error, "result": result.structured_content, "blocks": blocks}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("corpus")
    for name in NOTEBOOKS:
        shutil.copyfile(HERE / "notebooks" / name, root / name)
    settings = Settings(root=root, lock_dir=root.parent / "locks", kernel_pool=0)
    async with Client(build_server(settings)) as c:
        yield c


def test_the_corpus_covers_what_it_promises() -> None:
    """Every kind of notebook the corpus is for is in it (a new notebook needs its goldens)."""
    texts = {name: (HERE / "notebooks" / name).read_text(encoding="utf-8") for name in NOTEBOOKS}
    joined = "".join(texts.values())
    for needle in (
        '"image/png"',
        "application/vnd.jupyter.widget-view+json",
        '"output_type": "error"',
        '"attachments"',
        '"name": "deno"',
    ):
        assert needle in joined, needle
    minors = {json.loads(t)["nbformat_minor"] for t in texts.values()}
    assert {0, 4, 5} <= minors
    assert max(len(t) for t in texts.values()) > 200_000  # a big output
    stored = {p.name for p in (HERE / "golden").glob("*.json")}
    assert stored == {f"{Path(n).stem}.{v}.json" for n in NOTEBOOKS for v in VIEWS}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("name", NOTEBOOKS)
async def test_the_agent_view_matches_the_golden_file(client: Client, name: str, view: str) -> None:
    result = await client.call_tool("read_notebook", {"path": name, **VIEWS[view]})
    got = json.dumps(agent_view(result), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    golden = HERE / "golden" / f"{Path(name).stem}.{view}.json"
    if UPDATE:
        golden.write_text(got, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden.name}: run with NBRELAY_UPDATE_GOLDEN=1"
    assert got == golden.read_text(encoding="utf-8"), (
        f"the agent's view of {name} ({view}) changed: if that is intended, regenerate with "
        "NBRELAY_UPDATE_GOLDEN=1 and review the diff of tests/corpus/golden/"
    )
