"""The command line: options, errors, the demo, and the README staying true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from nbrelay.cli import build_parser, main, settings_from
from nbrelay.config import OPTIONS, Settings, load
from nbrelay.errors import InvalidArgument
from nbrelay.server import build_server

README = Path(__file__).resolve().parent.parent / "README.md"


def test_flags_beat_environment_beat_toml(tmp_path: Path) -> None:
    toml = {"output_budget": 1000, "undo_depth": 3}
    env = {"NBRELAY_OUTPUT_BUDGET": "2000"}
    s = load({"output_budget": 3000}, env, toml)
    assert (s.output_budget, s.undo_depth) == (3000, 3)
    assert load({}, env, toml).output_budget == 2000
    assert load({}, {}, toml).output_budget == 1000
    assert load({}, {}, {}).output_budget == Settings().output_budget


def test_bad_settings_name_the_flag_and_the_source() -> None:
    with pytest.raises(InvalidArgument) as info:
        load({}, {"NBRELAY_OUTPUT_BUDGET": "lots"}, {})
    assert (
        info.value.message
        == "--output-budget (from $NBRELAY_OUTPUT_BUDGET): 'lots' is not a valid int."
    )
    with pytest.raises(InvalidArgument) as info:
        load({}, {}, {"output_budget": 5})
    assert "outside the accepted range 200-1,000,000" in info.value.message
    with pytest.raises(InvalidArgument) as info:
        load({}, {}, {"no_such": 1})
    assert "unknown setting(s) in the config file: no_such" in info.value.message


def test_config_file_is_read(tmp_path: Path) -> None:
    cfg = tmp_path / "nbrelay.toml"
    cfg.write_text('[nbrelay]\nread_only = true\ntools = ["read_notebook"]\n')
    args = build_parser().parse_args(["serve", "--config", str(cfg)])
    s = settings_from(args, environ={})
    assert s.read_only
    assert s.tools == ("read_notebook",)


def test_read_only_mode_exposes_only_reading_tools(tmp_path: Path) -> None:
    server = build_server(Settings(root=tmp_path, read_only=True))
    names = {t.name for t in anyio.run(server.list_tools)}
    assert names == {
        "list_notebooks",
        "read_notebook",
        "read_cell",
        "search_notebook",
        "read_output",
        "notebook_view",  # the MCP Apps view's tool, listed only to clients that show views
    }


def test_unknown_tool_names_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "--root", str(tmp_path), "--tools", "read_notebook,nope"]) == 2
    assert "--tools names unknown tool(s): nope" in capsys.readouterr().err


def test_missing_root_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--root", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_demo_runs_the_real_server_and_leaves_a_valid_notebook(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nbrelay", "demo", "--dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "insert_cells -> new cells" in proc.stdout
    assert "refused" in proc.stdout
    import nbformat

    nbformat.validate(nbformat.read(tmp_path / "d" / "demo.ipynb", as_version=4))


def _readme_table(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def test_readme_lists_every_canonical_tool(tmp_path: Path) -> None:
    server = build_server(Settings(root=tmp_path))
    names = [t.name for t in anyio.run(server.list_tools)]
    assert _readme_table("## Tools") == names


def test_readme_lists_every_option() -> None:
    listed = _readme_table("## Options")
    assert listed == ["--config", "--log-level", *[o.flag for o in OPTIONS]]
