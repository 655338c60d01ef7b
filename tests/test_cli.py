"""The command line: options, errors, the demo, and the README and the docs staying true."""

from __future__ import annotations

import argparse
import json
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

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"


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


def _page_table(page: str) -> list[str]:
    """The first column of a docs page's tables, up to its first subsection."""
    text = (DOCS / page).read_text(encoding="utf-8")
    section = text.split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def test_the_tools_page_lists_every_canonical_tool(tmp_path: Path) -> None:
    server = build_server(Settings(root=tmp_path))
    names = [t.name for t in anyio.run(server.list_tools)]
    assert _page_table("tools.md") == names


def test_the_readme_names_every_canonical_tool(tmp_path: Path) -> None:
    """The README's tools in brief leave none out (each in backticks in its Tools table)."""
    server = build_server(Settings(root=tmp_path))
    names = [t.name for t in anyio.run(server.list_tools)]
    section = README.read_text(encoding="utf-8").split("\n## Tools\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| "))
    named = re.findall(r"`([a-z_]+)`", table)
    assert sorted(set(named)) == sorted(names)


def test_the_options_page_lists_every_option() -> None:
    listed = _page_table("options.md")
    assert listed == ["--config", "--log-level", *[o.flag for o in OPTIONS]]


# -- what the command says about itself --------------------------------------------------------


def test_tools_prints_each_description_s_first_paragraph_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tools", "--root", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert main(["tools", "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(listed)
    for line, tool in zip(lines, listed, strict=True):
        first = " ".join(tool["description"].split("\n\n")[0].split())
        assert line == f"{tool['name']:22} {first}", tool["name"]
    assert lines[-1].endswith("before git or any other program reads it.")  # was cut after "an"


def test_serve_help_shows_every_option_s_default() -> None:
    serve = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["serve"]
    for action in serve._actions:
        if action.option_strings and action.dest != "help":
            assert "default" in (action.help or ""), action.option_strings
    shown = " ".join(serve.format_help().split())
    assert "before head+tail truncation. (default: 6000)" in shown
    assert "Tool set to expose. (default: canonical)" in shown
    assert "notebook before giving up. (default: 10)" in shown
    for opt in OPTIONS:  # the value shown is the one Settings uses
        if "default:" not in opt.help:
            assert getattr(Settings(), opt.name) == opt.default, opt.name


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "--roott", "x"], "nbrelay serve has no option --roott (did you mean --root?)"),
        (["serve", "--outptu-budget=9"], "--outptu-budget (did you mean --output-budget?)"),
        (["settings", "--jsno"], "nbrelay settings has no option --jsno (did you mean --json?)"),
        (["demo", "--dirr", "x"], "nbrelay demo has no option --dirr (did you mean --dir?)"),
        (["serve", "--zzzzzz"], "nbrelay serve has no option --zzzzzz. `nbrelay serve --help`"),
        (["--root", "x"], "--root is an option of a command: `nbrelay serve --root …` serves"),
        (["--http=1"], "--http is an option of a command: `nbrelay serve --http …`"),
    ],
)
def test_a_misspelt_option_gets_the_nearest_real_one(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--http", "--token", "SECRET-sk-1234567890"],
        ["serve", "--http", "--token=SECRET-sk-1234567890"],
        ["serve", "--jupyter-token", "SECRET-sk-1234567890", "--http"],
        ["settings", "--password", "SECRET-sk-1234567890"],
        ["serve", "stray", "SECRET-sk-1234567890"],
    ],
)
def test_a_usage_error_never_repeats_a_value(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve --token SECRET` echoed the secret to stderr (and so to terminals and logs)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "SECRET" not in err
    assert "not repeated here" in err
    if any(w.startswith(("--token", "--jupyter-token", "--password")) for w in argv):
        assert "$NBRELAY_TOKEN or use --token-file" in err


def test_the_installed_command_hides_a_mistyped_token(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nbrelay", "serve", "--http", "--token", "SECRET-sk-1234567890"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "SECRET" not in done.stderr + done.stdout
    assert "did you mean --token-file?" in done.stderr
