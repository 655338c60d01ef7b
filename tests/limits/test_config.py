"""Session and limit settings from Srcbook's srcbook-mcp.json, and sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbrelay.cli import build_parser, main, make_storage, settings_from
from nbrelay.config import parse_size
from nbrelay.errors import InvalidArgument

SEED_CONFIG = {
    "name": "srcbook-notebook",
    "version": "1.0.0",
    "description": "Srcbook notebook execution for AI agents",
    "main": "./dist/mcp-server.js",
    "capabilities": {"tools": True, "resources": True, "events": True},
    "options": {
        "maxSessions": 10,
        "sessionTimeout": 3600000,
        "executionTimeout": 30000,
        "maxMemoryPerSession": "512MB",
        "allowNetworkAccess": False,
        "persistSessions": True,
        "storageDirectory": "./notebook-sessions",
    },
}


def test_the_seed_configuration_maps_onto_nbrelay_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "srcbook-mcp.json"
    cfg.write_text(json.dumps(SEED_CONFIG))
    args = build_parser().parse_args(["serve", "--config", str(cfg), "--max-sessions", "3"])
    s = settings_from(args, environ={"NBRELAY_EXECUTION_TIMEOUT": "45"})
    assert s.max_sessions == 3  # the flag wins
    assert s.execution_timeout == 45.0  # then the environment
    assert s.kernel_idle_timeout == 3600.0
    assert s.kernel_memory == 512
    assert s.kernel_network is False
    assert s.persist_sessions is True
    assert s.root == tmp_path / "notebook-sessions"  # storageDirectory: the sessions' folder
    assert s.session_dir is None
    plain = settings_from(build_parser().parse_args(["serve", "--config", str(cfg)]), environ={})
    assert (plain.max_sessions, plain.execution_timeout) == (10, 30.0)


def test_the_seed_configuration_sandboxes_kernels_unless_it_says_not(tmp_path: Path) -> None:
    """ "Sandboxed to notebook working directory": a srcbook-mcp.json turns the sandbox on; its
    "sandbox": false or --no-sandbox turn it off."""
    cfg = tmp_path / "srcbook-mcp.json"
    cfg.write_text(json.dumps(SEED_CONFIG))
    seed = settings_from(build_parser().parse_args(["serve", "--config", str(cfg)]), environ={})
    assert seed.sandbox is True
    flag = build_parser().parse_args(["serve", "--config", str(cfg), "--no-sandbox"])
    assert settings_from(flag, environ={}).sandbox is False
    cfg.write_text(json.dumps({"options": {**SEED_CONFIG["options"], "sandbox": False}}))  # type: ignore[dict-item]
    off = settings_from(build_parser().parse_args(["serve", "--config", str(cfg)]), environ={})
    assert off.sandbox is False


def test_the_sessions_folder_is_created_only_by_serve(tmp_path: Path) -> None:
    """The storageDirectory a srcbook-mcp.json names is created when the server starts with it
    as the root (not by `nbrelay settings`, and not when --root names another folder); one
    that cannot be created stops start-up with the reason."""
    cfg = tmp_path / "srcbook-mcp.json"
    cfg.write_text(json.dumps(SEED_CONFIG))
    storage = tmp_path / "notebook-sessions"
    assert main(["settings", "--config", str(cfg)]) == 0
    assert not storage.exists()
    other = tmp_path / "other"
    other.mkdir()
    args = ["serve", "--config", str(cfg), "--root", str(other)]
    make_storage(cfg, settings_from(build_parser().parse_args(args), environ={}))
    assert not storage.exists()
    seed = settings_from(build_parser().parse_args(["serve", "--config", str(cfg)]), environ={})
    make_storage(cfg, seed)
    assert storage.is_dir()
    blocked = tmp_path / "file"
    blocked.write_text("")
    options = {**SEED_CONFIG["options"], "storageDirectory": "./file/sessions"}  # type: ignore[dict-item]
    cfg.write_text(json.dumps({"options": options}))
    bad = settings_from(build_parser().parse_args(["serve", "--config", str(cfg)]), environ={})
    with pytest.raises(InvalidArgument, match="could not be created"):
        make_storage(cfg, bad)


def test_network_lists_come_from_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "srcbook-mcp.json"
    options = {"networkAllowList": ["api.example.com", "*.jsr.io"], "networkDenyList": "a,b:81"}
    cfg.write_text(json.dumps({"options": options}))
    s = settings_from(build_parser().parse_args(["serve", "--config", str(cfg)]), environ={})
    assert s.kernel_net_allow == ("api.example.com", "*.jsr.io")
    assert s.kernel_net_deny == ("a", "b:81")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"options": []}', '"options" must be an object'),
        ('{"options": {"maxSessions": 2, "turbo": true}}', "unknown option(s) turbo"),
        ('{"options": {"maxMemoryPerSession": "lots"}}', "maxMemoryPerSession = 'lots'"),
        ('{"options": {"maxSessions": -1}}', "outside the accepted range"),
        ('{"options": {"networkAllowList": [1]}}', "networkAllowList = [1] is not valid"),
    ],
)
def test_bad_srcbook_configuration_names_the_problem(
    tmp_path: Path, content: str, message: str
) -> None:
    cfg = tmp_path / "srcbook-mcp.json"
    cfg.write_text(content)
    with pytest.raises(InvalidArgument) as info:
        settings_from(build_parser().parse_args(["serve", "--config", str(cfg)]), environ={})
    assert message in str(info.value)


def test_sizes() -> None:
    assert parse_size("512MB") == 512 * 2**20
    assert parse_size("2 GiB") == 2 * 2**30
    assert parse_size("1g") == 2**30
    assert parse_size(4096) == 4096
    with pytest.raises(InvalidArgument, match="is not a size"):
        parse_size("big")


def test_kernel_env_comes_from_the_flag_the_environment_or_the_config_file(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "nbrelay.toml"
    cfg.write_text('kernel_env = ["PATH", "LC_*"]\n')

    def kernel_env(argv: list[str], environ: dict[str, str]) -> tuple[str, ...]:
        args = build_parser().parse_args(["serve", "--config", str(cfg), *argv])
        return settings_from(args, environ=environ).kernel_env

    assert kernel_env(["--kernel-env", "HOME"], {"NBRELAY_KERNEL_ENV": "TERM"}) == ("HOME",)
    assert kernel_env([], {"NBRELAY_KERNEL_ENV": "TERM, LANG"}) == ("TERM", "LANG")
    assert kernel_env([], {}) == ("PATH", "LC_*")
    plain = build_parser().parse_args(["serve"])
    assert settings_from(plain, environ={}).kernel_env == ()
    with pytest.raises(InvalidArgument, match=r"--kernel-env \(from the command line\): 'A=B'"):
        settings_from(build_parser().parse_args(["serve", "--kernel-env", "PATH,A=B"]), {})
