"""Settings: one frozen object, loaded with the precedence flags > environment > TOML > defaults.

Every option is declared once in ``nbrelay.options.OPTIONS`` (flag, environment variable, TOML
key and default all come from it); secrets and redaction live in ``nbrelay.redaction``. Both are
re-exported here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbrelay.errors import InvalidArgument
from nbrelay.options import OPTION_BY_NAME, OPTIONS, PROFILES, URL_OPTIONS, Option
from nbrelay.redaction import (
    CREDENTIAL_NAMES,
    JUPYTER_TOKEN_ENV,
    REDACTED,
    TOKEN_ENV,
    RedactSecrets,
    Secret,
    is_credential_name,
    redact,
    safe_url,
    url_problem,
)

__all__ = [
    "CREDENTIAL_NAMES",
    "JUPYTER_TOKEN_ENV",
    "OPTIONS",
    "OPTION_BY_NAME",
    "PROFILES",
    "REDACTED",
    "TOKEN_ENV",
    "URL_OPTIONS",
    "Option",
    "RedactSecrets",
    "Secret",
    "Settings",
    "is_credential_name",
    "load",
    "parse_size",
    "read_srcbook_json",
    "read_toml",
    "redact",
    "safe_url",
    "srcbook_storage",
    "url_problem",
]


def _default(name: str) -> Any:
    """An option's default, from its one declaration in ``OPTIONS``."""
    return OPTION_BY_NAME[name].default


@dataclass(frozen=True)
class Settings:
    root: Path = _default("root")
    profile: str = _default("profile")
    tools: tuple[str, ...] = _default("tools")
    read_only: bool = _default("read_only")
    output_schemas: bool = _default("output_schemas")
    output_budget: int = _default("output_budget")
    undo_depth: int = _default("undo_depth")
    shared_state: bool = _default("shared_state")
    lock_timeout: float = _default("lock_timeout")
    cache_mb: int = _default("cache_mb")
    lock_dir: Path | None = _default("lock_dir")
    browser: Path | None = _default("browser")
    export_timeout: float = _default("export_timeout")
    no_execute: bool = _default("no_execute")
    http: bool = _default("http")
    host: str = _default("host")
    port: int = _default("port")
    token_file: Path | None = _default("token_file")
    allowed_hosts: tuple[str, ...] = _default("allowed_hosts")
    allowed_origins: tuple[str, ...] = _default("allowed_origins")
    max_http_sessions: int = _default("max_http_sessions")
    http_timeout: float = _default("http_timeout")
    execution_timeout: float = _default("execution_timeout")
    max_execution_timeout: float = _default("max_execution_timeout")
    execution_wait: float = _default("execution_wait")
    interrupt_grace: float = _default("interrupt_grace")
    kernel_idle_timeout: float = _default("kernel_idle_timeout")
    kernel_pool: int = _default("kernel_pool")
    max_sessions: int = _default("max_sessions")
    max_kernels: int | None = _default("max_kernels")  # None: by where kernels run
    persist_sessions: bool = _default("persist_sessions")
    session_dir: Path | None = _default("session_dir")
    kernel_memory: int | None = _default("kernel_memory")
    kernel_cpu_time: int | None = _default("kernel_cpu_time")
    sandbox: bool = _default("sandbox")
    kernel_network: bool | None = _default("kernel_network")
    kernel_net_allow: tuple[str, ...] = _default("kernel_net_allow")
    kernel_net_deny: tuple[str, ...] = _default("kernel_net_deny")
    kernel_env: tuple[str, ...] = _default("kernel_env")
    cell_output_limit: int = _default("cell_output_limit")
    cell_display_limit: int = _default("cell_display_limit")
    # From $NBRELAY_TOKEN only: never a flag (argv is visible to every local user).
    token: Secret | None = field(default=None, repr=False, compare=False)
    jupyter_url: str | None = _default("jupyter_url")
    jupyter_token_file: Path | None = _default("jupyter_token_file")
    kernel_gateway_url: str | None = _default("kernel_gateway_url")
    live_save_wait: bool = _default("live_save_wait")
    agent_name: str = _default("agent_name")
    notebook: str = _default("notebook")
    # From $JUPYTER_TOKEN only (--jupyter-token-file is read when live mode starts).
    jupyter_token: Secret | None = field(default=None, repr=False, compare=False)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


def _coerce(opt: Option, value: Any, source: str) -> Any:
    where = f"{opt.flag} (from {source})"
    try:
        if value is None:
            return None
        if opt.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(value)
        if opt.kind is list:
            items = value if isinstance(value, list | tuple) else str(value).split(",")
            out: Any = tuple(str(v).strip() for v in items if str(v).strip())
        elif opt.kind is Path:
            return Path(str(value)).expanduser()
        elif opt.kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            out = int(value)
        elif opt.kind is float:
            out = float(value)
        else:
            out = str(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"{where}: {value!r} is not a valid {opt.kind.__name__}.",
            hint=f"{opt.help}",
        ) from exc
    if opt.pattern and isinstance(out, tuple):
        bad = [item for item in out if not re.fullmatch(opt.pattern, item)]
        if bad:
            raise InvalidArgument(
                f"{where}: {bad[0]!r} is not a variable name or a shell-style pattern.",
                hint=opt.help,
            )
    if opt.name in URL_OPTIONS and isinstance(out, str):
        problem = url_problem(out)
        if problem:
            raise InvalidArgument(
                f"{opt.flag} (from {source}) is refused: {problem}.",
                hint="Give the server's address alone (http://host:port/) and its token in "
                "$JUPYTER_TOKEN or --jupyter-token-file, so no credential shows in process "
                "lists or logs.",
            )
    if opt.choices and out not in opt.choices:
        raise InvalidArgument(
            f"{where}: {value!r} is not one of {', '.join(opt.choices)}.", hint=opt.help
        )
    numeric = isinstance(out, int | float) and not isinstance(out, bool)
    if numeric and ((opt.lo is not None and out < opt.lo) or (opt.hi is not None and out > opt.hi)):
        raise InvalidArgument(
            f"{where}: {value!r} is outside the accepted range {_num(opt.lo)}-{_num(opt.hi)}.",
            hint=opt.help,
        )
    return out


def _num(value: float | None) -> str:
    if value is None:
        return "any"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


def parse_size(value: Any) -> int:
    """Bytes from ``512MB``, ``2 GiB``, ``1g`` or a number of bytes."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    found = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", str(value), re.IGNORECASE)
    if not found:
        raise InvalidArgument(
            f"{value!r} is not a size.", hint='Write a size like "512MB", "2GB" or "1048576".'
        )
    power = " kmgt".index(found.group(2).lower() or " ")
    return int(float(found.group(1)) * 1024**power)


def _host_list(hosts: Any) -> tuple[str, ...]:
    """A list of host names from JSON: an array of strings (or one comma-separated string)."""
    if isinstance(hosts, str):
        hosts = hosts.split(",")
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise TypeError("a list of host names")
    return tuple(h.strip() for h in hosts if h.strip())


# Srcbook's srcbook-mcp.json "options" -> (setting, conversion)
SRCBOOK_OPTIONS: dict[str, tuple[str, Any]] = {
    "maxSessions": ("max_sessions", int),
    "sessionTimeout": ("kernel_idle_timeout", lambda ms: float(ms) / 1000),
    "executionTimeout": ("execution_timeout", lambda ms: float(ms) / 1000),
    "maxExecutionTimeout": ("max_execution_timeout", lambda ms: float(ms) / 1000),
    "maxMemoryPerSession": ("kernel_memory", lambda size: max(parse_size(size) >> 20, 1)),
    "maxCpuTimePerSession": ("kernel_cpu_time", lambda ms: max(int(ms) // 1000, 1)),
    "allowNetworkAccess": ("kernel_network", bool),
    "networkAllowList": ("kernel_net_allow", _host_list),
    "networkDenyList": ("kernel_net_deny", _host_list),
    "sandbox": ("sandbox", bool),
    "persistSessions": ("persist_sessions", bool),
    "storageDirectory": ("root", str),  # the sessions' folder: they are notebooks in the root
}


def read_srcbook_json(path: Path) -> dict[str, Any]:
    """Read a ``srcbook-mcp.json`` (Srcbook's MCP server configuration): its ``options`` become
    settings (times in milliseconds, sizes like "512MB"; ``storageDirectory``, the sessions'
    folder, is the root, relative to the file); the descriptive keys (name, version,
    capabilities…) are ignored. The sandbox is on unless the file says ``"sandbox": false``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InvalidArgument(
            f"config file {path} does not exist.", hint="Check the --config path."
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"config file {path} is not valid JSON: {exc}.") from exc
    options = data.get("options", {}) if isinstance(data, dict) else None
    if not isinstance(options, dict):
        raise InvalidArgument(f'config file {path}: "options" must be an object.')
    unknown = sorted(k for k in options if k not in SRCBOOK_OPTIONS)
    if unknown:
        raise InvalidArgument(
            f"config file {path}: unknown option(s) {', '.join(unknown)}.",
            hint=f"Known options: {', '.join(SRCBOOK_OPTIONS)}.",
        )
    out: dict[str, Any] = {}
    for key, value in options.items():
        name, convert = SRCBOOK_OPTIONS[key]
        try:
            out[name] = convert(value)
        except (TypeError, ValueError, InvalidArgument) as exc:
            raise InvalidArgument(f"config file {path}: {key} = {value!r} is not valid.") from exc
    if "root" in out:
        out["root"] = str((path.parent / out["root"]).resolve())
    # The specification's promise ("Sandboxed to notebook working directory ... No access to
    # parent directories"): its configuration runs kernels in the sandbox unless it says
    # "sandbox": false (or --no-sandbox is given).
    out.setdefault("sandbox", True)
    return out


def srcbook_storage(path: Path) -> Path | None:
    """The ``storageDirectory`` a ``srcbook-mcp.json`` names (absolute), or None."""
    options = json.loads(path.read_text(encoding="utf-8")).get("options") or {}
    folder = options.get("storageDirectory")
    return (path.parent / folder).resolve() if isinstance(folder, str) else None


def read_toml(path: Path) -> dict[str, Any]:
    """Read a TOML settings file; keys are option names (``output_budget = 8000``). A ``.json``
    file is read as Srcbook's ``srcbook-mcp.json`` (``read_srcbook_json``)."""
    if path.suffix.lower() == ".json":
        return read_srcbook_json(path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise InvalidArgument(
            f"config file {path} does not exist.", hint="Check the --config path."
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"config file {path} is not valid TOML: {exc}.") from exc
    table = data.get("nbrelay", data)
    if not isinstance(table, dict):
        raise InvalidArgument(f"config file {path}: [nbrelay] must be a table.")
    return dict(table)


def load(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    toml: Mapping[str, Any] | None = None,
    origins: dict[str, str] | None = None,
) -> Settings:
    """Build Settings; each value comes from the first of flags, environment, TOML, default.

    ``origins``, when given, receives where each option's value came from (its flag, its
    environment variable, "config file" or "default").

    Raises:
        InvalidArgument: an unknown TOML key or a value of the wrong type or range, naming the
            flag and where the value came from.
    """
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    environ = os.environ if environ is None else environ
    toml = dict(toml or {})
    unknown = sorted(k for k in toml if k not in OPTION_BY_NAME)
    if unknown:
        raise InvalidArgument(
            f"unknown setting(s) in the config file: {', '.join(unknown)}.",
            hint=f"Known settings: {', '.join(OPTION_BY_NAME)}.",
        )
    values: dict[str, Any] = {}
    found: dict[str, str] = {}
    for opt in OPTIONS:
        if opt.name in flags:
            values[opt.name] = _coerce(opt, flags[opt.name], "the command line")
            found[opt.name] = "command line"
        elif opt.env in environ:
            values[opt.name] = _coerce(opt, environ[opt.env], f"${opt.env}")
            found[opt.name] = f"${opt.env}"
        elif opt.name in toml:
            values[opt.name] = _coerce(opt, toml[opt.name], "the config file")
            found[opt.name] = "config file"
        else:
            found[opt.name] = "default"
    if origins is not None:
        origins.update(found)
    token = environ.get(TOKEN_ENV, "").strip()
    if token:
        values["token"] = Secret(token)
    jupyter_token = environ.get(JUPYTER_TOKEN_ENV, "").strip()
    if jupyter_token:
        values["jupyter_token"] = Secret(jupyter_token)
    if "tools" in values:
        values["tools"] = expand_presets(values["tools"], values.get("profile", "canonical"))
    return Settings(**values)


_READ_TOOLS = (
    "list_notebooks", "read_notebook", "read_cell", "search_notebook", "read_output",
    "notebook_view",  # the MCP Apps view's own tool (listed only for the view)
)  # fmt: skip
_EDIT_TOOLS = (
    *_READ_TOOLS,
    "create_notebook", "insert_cells", "edit_cell", "delete_cells", "move_cells", "merge_cells",
    "split_cell", "clear_outputs", "replace_in_notebook", "undo", "notebook_metadata",
)  # fmt: skip
TOOL_PRESETS: dict[str, tuple[str, ...]] = {
    "read": _READ_TOOLS,
    "edit": _EDIT_TOOLS,
    "run": (
        *_EDIT_TOOLS,
        "execute", "get_execution", "cancel_execution", "interrupt_kernel", "restart_kernel",
        "list_kernels", "list_variables", "inspect_variable",
    ),
}  # fmt: skip


def expand_presets(names: tuple[str, ...], profile: str) -> tuple[str, ...]:
    """``--tools`` with preset names (read, edit, run) replaced by the tools they stand for."""
    if not any(n in TOOL_PRESETS for n in names):
        return names
    if profile != "canonical":
        raise InvalidArgument(
            f"--tools presets ({', '.join(TOOL_PRESETS)}) name canonical tools; profile "
            f"{profile!r} has its own.",
            hint="Give that profile's tool names (`nbrelay tools --profile …` lists them).",
        )
    out = [t for n in names for t in TOOL_PRESETS.get(n, (n,))]
    return tuple(dict.fromkeys(out))
