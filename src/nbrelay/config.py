"""Settings: one frozen object, loaded with the precedence flags > environment > TOML > defaults.

Every option is declared once in ``OPTIONS``: its command-line flag (``--output-budget``), its
environment variable (``NBRELAY_OUTPUT_BUDGET``) and its TOML key (``output_budget``) all come
from its name. ``nbrelay serve --help`` and the README's option table are built from the same
list, and a test keeps them equal.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbrelay.errors import InvalidArgument

PROFILES = ("canonical",)


@dataclass(frozen=True)
class Option:
    """One setting: its name, type, default and help; ``lo``/``hi`` bound numbers."""

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    secret: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "NBRELAY_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("root", Path, Path("."), "Folder whose notebooks are served (file mode)."),
    Option("profile", str, "canonical", "Tool set to expose.", choices=PROFILES),
    Option(
        "tools",
        list,
        (),
        "Comma-separated tool names to expose (default: all of the profile's tools).",
    ),
    Option("read_only", bool, False, "Expose only tools that read; no tool can change a notebook."),
    Option(
        "output_schemas",
        bool,
        False,
        "Declare each tool's output JSON schema in tools/list (results always carry "
        "structuredContent; the schemas add about 40% to the context every agent pays).",
    ),
    Option(
        "output_budget",
        int,
        6000,
        "Characters of cell output one tool result may carry before head+tail truncation.",
        lo=200,
        hi=1_000_000,
    ),
    Option("undo_depth", int, 50, "Changes per notebook that undo can revert.", lo=0, hi=10_000),
    Option(
        "lock_timeout",
        float,
        10.0,
        "Seconds to wait for another process's lock on a notebook before giving up.",
        lo=0.1,
        hi=600,
    ),
    Option(
        "lock_dir",
        Path,
        None,
        "Folder for cross-process lock files (default: a per-user folder in the temp dir).",
    ),
)

OPTION_BY_NAME = {o.name: o for o in OPTIONS}


@dataclass(frozen=True)
class Settings:
    root: Path = Path(".")
    profile: str = "canonical"
    tools: tuple[str, ...] = ()
    read_only: bool = False
    output_schemas: bool = False
    output_budget: int = 6000
    undo_depth: int = 50
    lock_timeout: float = 10.0
    lock_dir: Path | None = None

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
            return tuple(str(v).strip() for v in items if str(v).strip())
        if opt.kind is Path:
            return Path(str(value)).expanduser()
        if opt.kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            out: Any = int(value)
        elif opt.kind is float:
            out = float(value)
        else:
            out = str(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"{where}: {value!r} is not a valid {opt.kind.__name__}.",
            hint=f"{opt.help}",
        ) from exc
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


def read_toml(path: Path) -> dict[str, Any]:
    """Read a TOML settings file; keys are option names (``output_budget = 8000``)."""
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
) -> Settings:
    """Build Settings; each value comes from the first of flags, environment, TOML, default.

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
    for opt in OPTIONS:
        if opt.name in flags:
            values[opt.name] = _coerce(opt, flags[opt.name], "the command line")
        elif opt.env in environ:
            values[opt.name] = _coerce(opt, environ[opt.env], f"${opt.env}")
        elif opt.name in toml:
            values[opt.name] = _coerce(opt, toml[opt.name], "the config file")
    return Settings(**values)
