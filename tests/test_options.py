"""The command line as users meet it: every subcommand's --help, and every option in the
Options page's table (docs/options.md) reaching its setting from its flag, its environment variable and its TOML
key, through ``main(argv)`` (``nbrelay settings --json`` prints what ``serve`` would run with).

Nothing here lists options: each documented row and each parser option is checked generically, so
an option added later is covered, and an option in one but not the other fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nbrelay.cli import build_parser, main, switch_flags
from nbrelay.config import OPTIONS, Option, Settings, load
from nbrelay.errors import InvalidArgument

OPTIONS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "options.md"
FLAG_ONLY = {"--config", "--log-level"}  # options of the command, not settings


@dataclass(frozen=True)
class Row:
    flag: str
    env: str
    toml: str
    default: str


def documented_rows() -> list[Row]:
    section = OPTIONS_PAGE.read_text(encoding="utf-8").split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        flag, env, toml, default = (c.strip("`") for c in cells[:4])
        rows.append(Row(flag, env, toml, default))
    return rows


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def primary_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Each option's first long flag (a switch's "on" flag), help aside."""
    return {
        next(s for s in a.option_strings if s.startswith("--"))
        for a in parser._actions
        if a.option_strings and a.dest != "help"
    }


def option_for(flag: str) -> Option:
    found = [o for o in OPTIONS if o.flag == flag]
    assert found, f"{flag} is in the Options page's table but is no option"
    return found[0]


# -- --help -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [None, *subcommands()])
def test_every_help_exits_0(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--help"] if command is None else [command, "--help"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nbrelay")
    if command in ("serve", "tools", "settings"):
        for opt in OPTIONS:  # every option is listed, with its help text
            assert opt.flag in out


def test_every_help_of_the_installed_command_exits_0() -> None:
    """The console script as users run it (a crash in argparse's formatting shows only here
    and in the in-process test above)."""
    script = shutil.which("nbrelay", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "nbrelay"]
    for name in subcommands():
        done = subprocess.run(
            [*command, name, "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert done.stdout.startswith(f"usage: nbrelay {name}"), done.stdout[:200]


# -- the Options page's table and the parser ----------------------------------------------------------


def test_documented_options_are_exactly_the_parsers() -> None:
    listed = [r.flag for r in documented_rows()]
    assert len(listed) == len(set(listed)), "an option is listed twice"
    commands = subcommands()
    serve = primary_flags(commands["serve"])
    assert set(listed) == serve, (
        f"only in docs/options.md: {sorted(set(listed) - serve)}; "
        f"only in `nbrelay serve`: {sorted(serve - set(listed))}"
    )
    for name in ("tools", "settings"):  # they take serve's options, plus --json
        assert primary_flags(commands[name]) - {"--json"} == serve, name


# -- each row: flag, environment variable and TOML key reach the same setting --------------------


def sample(opt: Option, tmp_path: Path) -> str:
    """A valid value other than the default, as it is written on the command line."""
    default = getattr(Settings(), opt.name)
    low = opt.lo if opt.lo is not None else 0
    high = opt.hi if opt.hi is not None else low + 1000
    candidates: list[str] = []
    if opt.choices:
        candidates += list(opt.choices)
    elif opt.kind is int:
        candidates += [str(int(low) + k) for k in (1, 2, 3) if int(low) + k <= high]
    elif opt.kind is float:
        candidates += [repr(low + k) for k in (1.5, 2.5) if low + k <= high]
    elif opt.kind is Path:
        candidates.append(str(tmp_path / f"{opt.name}-sample"))
    candidates += ["alpha,beta", "A=1,B=2", "sample-value", "http://127.0.0.1:9/", "1"]
    for text in candidates:
        try:
            value = getattr(load({opt.name: text}, {}, {}), opt.name)
        except InvalidArgument:
            continue
        if value != default:
            return text
    raise AssertionError(f"no valid non-default sample value for {opt.flag}")


def toml_literal(opt: Option, text: str) -> str:
    if opt.kind in (int, float):
        return text
    value = getattr(load({opt.name: text}, {}, {}), opt.name)
    if isinstance(value, tuple):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return json.dumps(text)


def shown(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """What ``nbrelay settings --json ARGV`` prints: the settings and where each came from."""
    capsys.readouterr()
    code = main(["settings", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    return data["settings"], data["from"]


@pytest.mark.parametrize("row", documented_rows(), ids=lambda r: r.flag)
def test_each_option_reaches_its_setting_from_flag_environment_and_toml(
    row: Row, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if row.flag in FLAG_ONLY:
        assert not row.env, f"{row.flag} is a flag alone"
        assert not row.toml, f"{row.flag} is a flag alone"
        return
    opt = option_for(row.flag)
    assert row.env, f"{row.flag}: docs/options.md names no environment variable"
    assert row.toml, f"{row.flag}: docs/options.md names no TOML key"
    defaults, origins = shown([], capsys)
    assert origins[opt.name] == "default"
    if opt.kind is bool:
        on, off = switch_flags(opt)
        flag_argv, env_text, toml_text = [on], "1", "true"
        assert defaults[opt.name] is not True, f"{row.flag} is on by default: name its off flag"
    else:
        text = sample(opt, tmp_path)
        flag_argv, env_text, toml_text = [row.flag, text], text, toml_literal(opt, text)

    by_flag, origin = shown(flag_argv, capsys)
    assert by_flag[opt.name] != defaults[opt.name], f"{row.flag} did nothing"
    assert origin[opt.name] == "command line"

    monkeypatch.setenv(row.env, env_text)
    by_env, origin = shown([], capsys)
    assert origin[opt.name] == f"${row.env}", f"{row.env} is not {row.flag}'s variable"
    assert by_env[opt.name] == by_flag[opt.name]
    monkeypatch.delenv(row.env)

    config = tmp_path / "nbrelay.toml"
    config.write_text(f"[nbrelay]\n{row.toml} = {toml_text}\n", encoding="utf-8")
    by_toml, origin = shown(["--config", str(config)], capsys)
    assert origin[opt.name] == "config file", f"{row.toml} is not {row.flag}'s key"
    assert by_toml[opt.name] == by_flag[opt.name]

    if opt.kind is bool:
        # the opposite flag wins over the environment and the file
        monkeypatch.setenv(row.env, "1")
        by_off, origin = shown([off, "--config", str(config)], capsys)
        assert by_off[opt.name] is False, f"{off} did not turn {row.flag} off"
        assert origin[opt.name] == "command line"


def test_a_flag_beats_the_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "nbrelay.toml"
    config.write_text("output_budget = 1000\nundo_depth = 3\nno_execute = true\n")
    monkeypatch.setenv("NBRELAY_OUTPUT_BUDGET", "2000")
    values, origins = shown(["--config", str(config), "--execute"], capsys)
    assert (values["output_budget"], values["undo_depth"], values["no_execute"]) == (2000, 3, False)
    assert (origins["output_budget"], origins["undo_depth"]) == (
        "$NBRELAY_OUTPUT_BUDGET",
        "config file",
    )
    values, _ = shown(["--config", str(config), "--output-budget", "3000"], capsys)
    assert values["output_budget"] == 3000


def test_settings_never_print_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NBRELAY_TOKEN", "canary-token-8d1f")
    assert main(["settings"]) == 0
    text = capsys.readouterr().out
    values, origins = shown([], capsys)
    assert "canary-token-8d1f" not in text + json.dumps(values)
    assert values["token"] == "<hidden>"
    assert origins["token"] == "$NBRELAY_TOKEN"
    assert "NBRELAY_TOKEN" in os.environ  # showing settings does not consume it


def test_bad_values_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings", "--output-budget", "lots"]) == 2
    assert "--output-budget (from the command line): 'lots' is not a valid int" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as info:
        main(["serve", "--no-no-execute"])
    assert info.value.code == 2
    assert "nbrelay serve has no option --no-no-execute (did you mean --no-execute?)" in (
        capsys.readouterr().err
    )


# -- what the cautious options do, in every profile ----------------------------------------------

MARKER = "ran-marker"
RUNS = f"open({MARKER!r}, 'w').write('code ran')"


def _kinds(profile: str, root: Path, **extra: Any) -> dict[str, str]:
    from nbrelay.server import PROFILES, build_workspace
    from nbrelay.tools._boundary import Registrar

    reg = Registrar()
    settings = Settings(root=root, profile=profile, **extra)
    PROFILES[profile](reg, build_workspace(settings))
    return dict(reg.kinds)


def _cautious_root(tmp_path: Path) -> Path:
    from nbrelay.notebook.model import new_cell, new_notebook, serialize

    root = tmp_path / "root"
    root.mkdir()
    cells = [new_cell("code", RUNS, "c0"), new_cell("code", RUNS, "c1")]
    (root / "a.ipynb").write_bytes(serialize(new_notebook(cells)))
    return root


PROFILE_NAMES = (
    "canonical",
    "ipynb-mcp",
    "notebook-lr",
    "jupyterlab-rtc",
    "mcp-jupyter",
    "srcbook",
    "jupyter-mcp-server",
)


def test_profile_list_is_complete() -> None:
    from nbrelay.server import PROFILES

    assert set(PROFILE_NAMES) == set(PROFILES)


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_cautious_flags_shape_every_profiles_tool_list(
    profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``nbrelay tools --json`` with --no-execute / --read-only, in every profile."""
    root = _cautious_root(tmp_path)

    def listed(*flags: str) -> set[str]:
        capsys.readouterr()
        assert main(["tools", "--json", "--root", str(root), "--profile", profile, *flags]) == 0
        return {t["name"] for t in json.loads(capsys.readouterr().out)}

    kinds = _kinds(profile, root)
    no_exec_kinds = _kinds(profile, root, no_execute=True)
    assert listed() == set(kinds)
    assert listed("--no-execute") == {
        n for n, k in no_exec_kinds.items() if k not in ("execute", "inspect")
    }
    assert listed("--read-only") == {n for n, k in kinds.items() if k == "read"}
    # the opposite flag wins over the environment
    os.environ["NBRELAY_NO_EXECUTE"] = "1"
    try:
        assert listed("--execute") == set(kinds)
        assert listed() == listed("--no-execute")
    finally:
        del os.environ["NBRELAY_NO_EXECUTE"]


@pytest.mark.anyio
@pytest.mark.parametrize("profile", PROFILE_NAMES)
async def test_no_execute_over_stdio_runs_no_code_in_any_profile(
    profile: str, tmp_path: Path
) -> None:
    """`nbrelay serve --no-execute` over stdio with the official client: no tool that runs code
    is listed, calling one by name fails, and calling every listed tool (every boolean argument
    on: execute, exec, run_all, ...) runs no code and starts no kernel."""
    import anyio
    import psutil
    from mcp import Client, StdioServerParameters

    from tests.security.surface import Tool, baseline

    root = _cautious_root(tmp_path)
    kinds = _kinds(profile, root)
    runs_code = {n for n, k in kinds.items() if k in ("execute", "inspect")}
    argv = ["-m", "nbrelay", "serve", "--root", str(root), "--profile", profile]
    argv += ["--no-execute", "--notebook", "a.ipynb", "--lock-dir", str(tmp_path / "locks")]
    me = psutil.Process()
    before = {c.pid for c in me.children(recursive=True)}
    with anyio.fail_after(240):
        async with Client(StdioServerParameters(command=sys.executable, args=argv)) as client:
            (server,) = [c for c in me.children() if c.pid not in before]
            tools = (await client.list_tools()).tools
            names = {t.name for t in tools}
            assert names
            assert not names & runs_code - set(_kinds(profile, root, no_execute=True))
            for name in sorted(runs_code - names):
                result = await client.call_tool(name, {})
                assert result.is_error, name
            for t in tools:
                schema = dict(t.input_schema)
                shape = Tool(profile, t.name, schema, "write")
                args = baseline(shape, dict.fromkeys(shape.path_params, "a.ipynb"))
                for key, prop in shape.properties.items():
                    if prop.get("type") == "boolean":
                        args[key] = True
                await client.call_tool(t.name, args)
            kernels = server.children(recursive=True)
            assert kernels == [], [" ".join(k.cmdline()) for k in kernels]
    assert not (root / MARKER).exists(), f"{profile}: code ran under --no-execute"
