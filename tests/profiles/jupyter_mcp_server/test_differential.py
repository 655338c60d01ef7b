"""Profile jupyter-mcp-server against the original: datalayer's jupyter-mcp-server 2.2.4 (PyPI,
in a virtual environment of its own) on a JupyterLab started here, and nbrelay's profile on the
same fixtures in file, live and extension modes, run through one call sequence
(``sequence.STEPS``: 51 calls, 18 of them errors), compared step by step on error flag, content
and structured content with ids and times masked.

The steps where nbrelay differs are listed with their reason; a step that starts or stops
differing fails the test, so the figure in the README stays true (51 / 51 on a Jupyter Server,
live and extension modes; 47 / 51 in file mode).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.extension.conftest import ext_client
from tests.extension.conftest import start_ext_server as start_ext_server  # a fixture
from tests.helpers import PATIENCE, missing_tool
from tests.live.server import JupyterServer
from tests.profiles.conftest import ProfileClient, client_factory
from tests.profiles.jupyter_mcp_server import original
from tests.profiles.jupyter_mcp_server.sequence import STEPS, normalise, write_fixtures
from tests.servers import free_port, running

pytestmark = pytest.mark.anyio

PROFILE = "jupyter-mcp-server"

# Steps (0-based, into STEPS) where nbrelay's answer differs from the original's, and why.
EMPTY_NOTEBOOK = (
    "the original reads a notebook through its collaboration room, where jupyter_ydoc gives a "
    "notebook with no cells one empty code cell; file mode reads the file, which has none"
)
ON_A_SERVER: dict[int, str] = {}
DIFFERENCES: dict[str, dict[int, str]] = {
    "file": {
        37: EMPTY_NOTEBOOK,  # use_notebook(empty): "1 cells" / "0 cells"
        38: EMPTY_NOTEBOOK,  # read_notebook(empty)
        39: EMPTY_NOTEBOOK,  # read_cell(0): that cell / out of range
        40: EMPTY_NOTEBOOK,  # delete_cell([0]): deleted / out of range
    },
    "live": ON_A_SERVER,
    "extension": ON_A_SERVER,
}

Transcript = list[dict[str, Any]]


async def transcript(client: Client) -> Transcript:
    """Every step's normalised result, ids numbered across the whole run."""
    ids: dict[str, str] = {}
    rows: Transcript = []
    for tool, args in STEPS:
        with anyio.fail_after(PATIENCE):
            result = await client.call_tool(tool, args)
        rows.append({"call": [tool, args], **normalise(result, ids)})
    return rows


@pytest.fixture(scope="module")
def the_original(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The original's tools/list and its transcript of STEPS, on a JupyterLab of its own whose
    root holds the fixtures."""
    try:
        original.ensure()
    except (OSError, subprocess.SubprocessError) as exc:
        missing_tool(f"{original.REQUIREMENT} could not be installed: {exc}")
    base = tmp_path_factory.mktemp("original")
    write_fixtures(base / "root")
    recorded: dict[str, Any] = {}

    async def record(server: JupyterServer) -> None:
        params = original.server(server.url, server.token, base)
        async with Client(params) as client:
            listed = await client.list_tools()
            recorded["tools"] = [
                t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools
            ]
            recorded["steps"] = await transcript(client)

    with running(JupyterServer(root=base / "root", work=base / "work", port=free_port())) as s:
        anyio.run(record, s)
    return recorded


Opener = Callable[[], AbstractAsyncContextManager[Client]]


@pytest.fixture(params=["file", "live", "extension"])
def mode_client(request: pytest.FixtureRequest, root: Path, tmp_path: Path) -> tuple[str, Opener]:
    """The profile on the fixtures, in each mode: a client opener."""
    mode = str(request.param)
    if mode == "file":
        write_fixtures(root)
        factory = client_factory("auto", root, tmp_path)
        return mode, lambda: factory(PROFILE)
    if mode == "live":
        live: tuple[ProfileClient, Path] = request.getfixturevalue("live_client")
        opener, local = live
        write_fixtures(local)
        return mode, lambda: opener(PROFILE)
    start = request.getfixturevalue("start_ext_server")
    server: JupyterServer = start(args=[f"--NbrelayExtension.profile={PROFILE}"])
    write_fixtures(server.root)

    @asynccontextmanager
    async def opened() -> AsyncIterator[Client]:
        async with ext_client(server) as client:
            yield client

    return mode, opened


async def test_the_profile_answers_as_the_original_does(
    the_original: dict[str, Any], mode_client: tuple[str, Opener]
) -> None:
    mode, opener = mode_client
    async with opener() as client:
        mine = await transcript(client)
    theirs: Transcript = the_original["steps"]
    differ = {i for i, (a, b) in enumerate(zip(theirs, mine, strict=True)) if a != b}
    shown = "\n".join(
        f"step {i} {theirs[i]['call']}:\n  original: {json.dumps(theirs[i])[:900]}\n"
        f"  nbrelay:  {json.dumps(mine[i])[:900]}"
        for i in sorted(differ)
    )
    same = len(STEPS) - len(differ)
    assert differ == set(DIFFERENCES[mode]), f"{same}/{len(STEPS)} steps identical\n{shown}"
    for i in differ:  # the same call fails or succeeds in both, but for the empty notebook
        assert theirs[i]["error"] == mine[i]["error"] or DIFFERENCES[mode][i] == EMPTY_NOTEBOOK


def _parameter(schema: dict[str, Any]) -> dict[str, Any]:
    """What a client relies on of a parameter: its JSON types, default, enum and bounds."""
    kinds = schema.get("anyOf") or [schema]
    types = [k.get("type") for k in kinds]
    return {
        "types": sorted({str(t) for ts in types for t in (ts if isinstance(ts, list) else [ts])}),
        "items": sorted(str(k.get("items", {}).get("type")) for k in kinds if "items" in k),
        "default": schema.get("default", ...),
        **{
            key: k[key]
            for k in kinds
            for key in ("enum", "minimum", "maximum", "minItems")
            if key in k
        },
    }


def _interface(tool: dict[str, Any]) -> dict[str, Any]:
    schema = tool["inputSchema"]
    return {
        "parameters": {n: _parameter(p) for n, p in schema.get("properties", {}).items()},
        "required": sorted(schema.get("required", [])),
        "annotations": tool.get("annotations"),
        "output": sorted(tool.get("outputSchema", {}).get("properties", {})),
    }


async def test_the_tools_are_the_originals(
    the_original: dict[str, Any], root: Path, tmp_path: Path
) -> None:
    """Names, parameters (types, defaults, required, enums, bounds), annotations and the fields
    of the output schema, as the original lists them."""
    async with client_factory("auto", root, tmp_path)(PROFILE) as client:
        listed = await client.list_tools()
    mine = {
        t.name: _interface(t.model_dump(mode="json", by_alias=True, exclude_none=True))
        for t in listed.tools
    }
    theirs = {t["name"]: _interface(t) for t in the_original["tools"]}
    assert list(mine) == sorted(theirs)
    for name, interface in theirs.items():
        assert mine[name] == interface, name
