"""Each profile's ``tools/list`` as a client receives it, kept as golden JSON
(tests/tools/golden/<profile>.json): an SDK upgrade, a schema change or a reworded description
shows as a diff. After an intended change, regenerate with
``NBRELAY_REGEN_GOLDEN=1 python -m pytest tests/tools/test_tools_list.py`` and review the diff."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import ToolAnnotations

from bench.tools_size import listing
from nbrelay.config import Settings
from nbrelay.server import PROFILES, build_server

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("NBRELAY_REGEN_GOLDEN") == "1"
# The canonical profile's tools/list as sent to a client without MCP Apps, in bytes (19,382
# before it was trimmed, then 14,315; 11,874 with the conventions said once): what every agent
# pays per turn. `--tools read/edit/run` presets send less.
CANONICAL_BUDGET = 12_800


async def _listed(tmp_path: Path, profile: str, **extra: Any) -> list[Any]:
    settings = Settings(root=tmp_path, profile=profile, lock_dir=tmp_path / "locks", **extra)
    async with Client(build_server(settings)) as client:
        return list((await client.list_tools()).tools)


def _snapshot(tools: list[Any]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_tools_list_matches_the_golden_file(profile: str, tmp_path: Path) -> None:
    got = _snapshot(await _listed(tmp_path, profile))
    path = GOLDEN / f"{profile}.json"
    text = json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    if REGEN:
        path.write_text(text, encoding="utf-8")
    want = json.loads(path.read_text(encoding="utf-8"))
    assert got == want, (
        f"tools/list of {profile} changed; if intended, regenerate with NBRELAY_REGEN_GOLDEN=1 "
        "and review the diff of tests/tools/golden/"
    )


async def test_kernel_inspection_tools_are_marked_read_only(tmp_path: Path) -> None:
    """Listing kernels and reading variables change nothing: clients may call them without
    asking; tools that delete or restart stay destructive."""
    tools = {t.name: t for t in await _listed(tmp_path, "canonical")}
    for name in ("list_kernels", "list_variables", "inspect_variable"):
        assert tools[name].annotations is not None, name
        assert tools[name].annotations.read_only_hint is True, name
    for name in ("delete_cells", "clear_outputs", "restart_kernel", "undo"):
        hints = tools[name].annotations or ToolAnnotations()
        assert not hints.read_only_hint, name
        assert hints.destructive_hint is not False, name
    for name in ("execute", "install_packages"):
        hints = tools[name].annotations or ToolAnnotations()  # none sent: spec defaults
        assert not hints.read_only_hint, name
        assert hints.destructive_hint is not False, name


async def test_kernel_inspection_tools_stay_out_under_no_execute(tmp_path: Path) -> None:
    names = {t.name for t in await _listed(tmp_path, "canonical", no_execute=True)}
    assert not names & {"list_variables", "inspect_variable", "list_kernels", "execute"}
    assert "read_notebook" in names


async def test_canonical_tools_list_fits_the_budget(tmp_path: Path) -> None:
    size = len(listing(await _listed(tmp_path, "canonical")))
    assert size <= CANONICAL_BUDGET, f"canonical tools/list is {size} bytes"


async def test_the_canonical_table_is_the_listing(tmp_path: Path) -> None:
    """``canonical.TOOLS`` names the canonical tools in the order tools/list shows them (the MCP
    Apps view's own tool only to clients that show views), and every preset names some of them."""
    from nbrelay.config import TOOL_PRESETS
    from nbrelay.tools import apps, canonical

    table = [fn.__name__ for fn, *_ in canonical.TOOLS]
    listed = [t.name for t in await _listed(tmp_path, "canonical")]
    assert [name for name in table if name != apps.POLL_TOOL] == listed
    assert apps.POLL_TOOL in table
    for preset, names in TOOL_PRESETS.items():
        assert set(names) <= set(table), preset


def test_tools_presets_expose_common_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nbrelay.cli import main
    from nbrelay.config import TOOL_PRESETS

    def listed(*flags: str) -> list[str]:
        capsys.readouterr()
        assert main(["tools", "--json", "--root", str(tmp_path), *flags]) == 0
        return [t["name"] for t in json.loads(capsys.readouterr().out)]

    read, edit, run = listed("--tools", "read"), listed("--tools", "edit"), listed("--tools", "run")
    assert set(read) == set(TOOL_PRESETS["read"])
    assert "read_notebook" in read
    assert "edit_cell" not in read
    assert set(read) < set(edit) < set(run)
    assert "execute" in run
    assert "execute" not in edit
    assert set(listed("--tools", "read,execute")) == {*read, "execute"}


def test_a_preset_with_a_compatibility_profile_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nbrelay.cli import main

    code = main(["tools", "--root", str(tmp_path), "--profile", "srcbook", "--tools", "read"])
    assert code != 0
    said = capsys.readouterr().err
    assert "presets" in said
    assert "srcbook" in said
