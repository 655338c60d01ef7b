"""Settings: one frozen object, loaded with the precedence flags > environment > TOML > defaults.

Every option is declared once in ``OPTIONS``: its command-line flag (``--output-budget``), its
environment variable (``NBRELAY_OUTPUT_BUDGET``) and its TOML key (``output_budget``) all come
from its name. ``nbrelay serve --help`` and the README's option table are built from the same
list, and a test keeps them equal.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbrelay.errors import InvalidArgument

PROFILES = ("canonical", "ipynb-mcp", "notebook-lr", "jupyterlab-rtc", "mcp-jupyter", "srcbook")


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
    pattern: str | None = None  # what each item of a list must be (a regular expression)

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
        "no_execute",
        bool,
        False,
        "Leave out every tool that runs code; the path rules are then the whole boundary.",
    ),
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
    Option(
        "browser",
        Path,
        None,
        "Chromium executable that prints PDF exports (default: chromium on PATH).",
    ),
    Option(
        "export_timeout",
        float,
        120.0,
        "Seconds one export or import conversion (nbconvert, Chromium) may take.",
        lo=5,
        hi=3600,
    ),
    Option("http", bool, False, "Serve streamable HTTP at /mcp instead of stdio."),
    Option(
        "host",
        str,
        "127.0.0.1",
        "Address --http listens on; off loopback a token is required.",
    ),
    Option("port", int, 8765, "Port --http listens on (0 picks a free one).", lo=0, hi=65535),
    Option(
        "token_file",
        Path,
        None,
        "File with the bearer token(s) for --http, one per line; created with a new random "
        "token if missing. $NBRELAY_TOKEN is the alternative.",
    ),
    Option(
        "allowed_hosts",
        list,
        (),
        "Extra Host names clients use to reach --http (loopback names and --host are allowed).",
    ),
    Option(
        "allowed_origins",
        list,
        (),
        "Browser origins allowed to call --http besides loopback ones, e.g. https://lab.example.",
    ),
    Option(
        "max_http_sessions",
        int,
        100,
        "Most MCP sessions open at once over --http (each client holds one; idle ones end after "
        "30 minutes); a client that would open another is refused with HTTP 503.",
        lo=1,
        hi=100_000,
    ),
    Option(
        "execution_timeout",
        float,
        600.0,
        "Seconds a cell may run before it is interrupted, when execute gives no timeout.",
        lo=1,
        hi=86_400,
    ),
    Option(
        "max_execution_timeout",
        float,
        7200.0,
        "The longest timeout (seconds) an execute call may ask for.",
        lo=1,
        hi=604_800,
    ),
    Option(
        "execution_wait",
        float,
        30.0,
        "Seconds execute waits for results before returning a handle to poll, when the call "
        "gives no wait.",
        lo=0,
        hi=3600,
    ),
    Option(
        "interrupt_grace",
        float,
        5.0,
        "Seconds a kernel has to stop after an interrupt before it is restarted.",
        lo=0.5,
        hi=600,
    ),
    Option(
        "kernel_idle_timeout",
        float,
        3600.0,
        "Seconds without activity after which a notebook's kernel is shut down (0: never).",
        lo=0,
        hi=604_800,
    ),
    Option(
        "kernel_pool",
        int,
        1,
        "Warm kernels (of the default kernelspec) kept ready for notebooks that have none yet.",
        lo=0,
        hi=8,
    ),
    Option(
        "max_sessions",
        int,
        0,
        "Most kernels (notebook sessions) running at once; another is refused (0: no limit).",
        lo=0,
        hi=10_000,
    ),
    Option(
        "max_kernels",
        int,
        0,
        "Most kernels running at once (the warm pool aside); a notebook that needs another waits "
        "while the least recently used idle one is stopped, its session kept (0: no limit).",
        lo=0,
        hi=10_000,
    ),
    Option(
        "persist_sessions",
        bool,
        False,
        "Save a Python kernel's variables (with dill) when it is stopped for idleness, and "
        "restore them when the notebook runs again.",
    ),
    Option(
        "session_dir",
        Path,
        None,
        "Folder for saved kernel states (default: .nbrelay-state next to each notebook).",
    ),
    Option(
        "kernel_memory",
        int,
        None,
        "Megabytes of memory (address space) each kernel may use (default: no limit).",
        lo=64,
        hi=16_777_216,
    ),
    Option(
        "kernel_cpu_time",
        int,
        None,
        "Seconds of CPU time each kernel may use before it is stopped (default: no limit).",
        lo=1,
        hi=31_536_000,
    ),
    Option(
        "sandbox",
        bool,
        False,
        "Run kernels in a bubblewrap sandbox: the notebook's folder read-write, the system "
        "read-only, nothing else; no network unless --kernel-network.",
    ),
    Option(
        "kernel_network",
        bool,
        None,
        "Let kernels use the network (default: yes, but no with --sandbox); "
        "--no-kernel-network cuts it off even without --sandbox.",
    ),
    Option(
        "kernel_env",
        list,
        (),
        "Environment variables kernels get: comma-separated names and shell-style patterns, "
        "e.g. PATH,HOME,LANG,LC_*; a credential-like variable passes only if named exactly "
        "(default: all but nbrelay's settings and credential-like ones).",
        pattern=r"[A-Za-z0-9_*?\[\]!-]+",
    ),
    Option(
        "cell_output_limit",
        int,
        1_000_000,
        "Characters of output stored per cell; beyond it the start and the end are kept, with a "
        "notice of what was dropped.",
        lo=1000,
        hi=100_000_000,
    ),
    Option(
        "jupyter_url",
        str,
        None,
        "Live mode: the Jupyter Server (JupyterLab) whose notebooks to serve, e.g. "
        "http://127.0.0.1:8888/; its token comes from $JUPYTER_TOKEN or --jupyter-token-file.",
    ),
    Option(
        "jupyter_token_file",
        Path,
        None,
        "Live mode: a file holding the Jupyter Server's token (instead of $JUPYTER_TOKEN).",
    ),
    Option(
        "kernel_gateway_url",
        str,
        None,
        "File mode: run kernels on this Jupyter Kernel Gateway or Enterprise Gateway instead of "
        "locally; its token comes from $JUPYTER_TOKEN or --jupyter-token-file.",
    ),
    Option(
        "agent_name",
        str,
        "nbrelay agent",
        "Live mode: the name people see for the agent among JupyterLab's online collaborators.",
    ),
    Option(
        "notebook",
        str,
        "notebook.nblr",
        "Profile notebook-lr: the current notebook its tools act on, under the root (created by "
        "the first add_cell or save_notebook; .nblr or .ipynb); load_notebook switches it.",
    ),
)

OPTION_BY_NAME = {o.name: o for o in OPTIONS}
URL_OPTIONS = frozenset({"jupyter_url", "kernel_gateway_url"})


class Secret:
    """A secret string (a token) that never shows in reprs, logs or tracebacks.

    Every secret made is remembered, so that ``redact`` (and the log filter ``RedactSecrets``)
    can take it out of any text, whatever library wrote it.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        if len(value) >= _MIN_SECRET:
            _SECRETS.add(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    __str__ = __repr__


_MIN_SECRET = 6  # shorter "secrets" would redact ordinary words
_SECRETS: set[str] = set()
REDACTED = "[redacted]"

# Query parameter names that carry credentials (compared lower-cased, without - and _), and
# the words that make any other name one.
CREDENTIAL_NAMES = frozenset(
    {
        "token", "accesstoken", "idtoken", "refreshtoken", "authtoken", "apitoken",
        "sessiontoken", "xsrf", "xsrftoken", "csrf", "csrftoken", "auth", "authorization",
        "apikey", "key", "xapikey", "secret", "clientsecret", "password", "passwd", "pass",
        "pwd", "bearer", "jwt", "sig", "signature", "credential", "credentials",
    }
)  # fmt: skip
_CREDENTIAL_WORDS = ("token", "secret", "passw", "apikey", "credential", "bearer")


def is_credential_name(name: str) -> bool:
    """Whether a query parameter (or header) named ``name`` would carry a credential."""
    plain = re.sub(r"[-_.\s]", "", name.lower())
    return plain in CREDENTIAL_NAMES or any(w in plain for w in _CREDENTIAL_WORDS)


def url_problem(url: str) -> str | None:
    """Why a server URL must be refused: credentials in it (user:password@, or a query parameter
    such as ?token=), which would show in process lists, logs and error messages."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url.strip())
        userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        return None  # not a URL at all: the caller says so
    if userinfo or "@" in parts.netloc:
        return "it carries a user name or password (user:password@host)"
    names = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if any(is_credential_name(k) for k in names):
        return "it carries a credential in its query string (such as ?token=)"
    return None


def safe_url(url: str) -> str:
    """``url`` as it may be shown: no user name, password, query or fragment."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url.strip())
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return REDACTED


_HEADER_SECRET = re.compile(
    r"(?i)\b(authorization|proxy-authorization|cookie|set-cookie|x-xsrftoken|x-api-key)"
    r"(\W{1,4})([^\r\n'\"]+)"
)
_QUERY_SECRET = re.compile(r"([?&;]([\w.\-]+)=)([^&\s'\"#]+)")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"]+@")


def redact(text: str) -> str:
    """``text`` without credentials: every known secret, the values of Authorization and
    Cookie headers, credential query parameters, and user:password@ in URLs."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _HEADER_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _QUERY_SECRET.sub(
        lambda m: m.group(1) + REDACTED if is_credential_name(m.group(2)) else m.group(0), text
    )
    return _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


class RedactSecrets(logging.Filter):
    """A log filter that takes credentials out of every record (message, arguments,
    traceback): the SDK's HTTP client and websockets log request headers at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: log what there is
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


TOKEN_ENV = "NBRELAY_TOKEN"  # noqa: S105 - the variable's name, not a token
JUPYTER_TOKEN_ENV = "JUPYTER_TOKEN"  # noqa: S105 - the variable's name, not a token


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
    browser: Path | None = None
    export_timeout: float = 120.0
    no_execute: bool = False
    http: bool = False
    host: str = "127.0.0.1"
    port: int = 8765
    token_file: Path | None = None
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_http_sessions: int = 100
    execution_timeout: float = 600.0
    max_execution_timeout: float = 7200.0
    execution_wait: float = 30.0
    interrupt_grace: float = 5.0
    kernel_idle_timeout: float = 3600.0
    kernel_pool: int = 1
    max_sessions: int = 0
    max_kernels: int = 0
    persist_sessions: bool = False
    session_dir: Path | None = None
    kernel_memory: int | None = None
    kernel_cpu_time: int | None = None
    sandbox: bool = False
    kernel_network: bool | None = None
    kernel_env: tuple[str, ...] = ()
    cell_output_limit: int = 1_000_000
    # From $NBRELAY_TOKEN only: never a flag (argv is visible to every local user).
    token: Secret | None = field(default=None, repr=False, compare=False)
    jupyter_url: str | None = None
    jupyter_token_file: Path | None = None
    kernel_gateway_url: str | None = None
    agent_name: str = "nbrelay agent"
    notebook: str = "notebook.nblr"
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


# Srcbook's srcbook-mcp.json "options" -> (setting, conversion)
SRCBOOK_OPTIONS: dict[str, tuple[str, Any]] = {
    "maxSessions": ("max_sessions", int),
    "sessionTimeout": ("kernel_idle_timeout", lambda ms: float(ms) / 1000),
    "executionTimeout": ("execution_timeout", lambda ms: float(ms) / 1000),
    "maxExecutionTimeout": ("max_execution_timeout", lambda ms: float(ms) / 1000),
    "maxMemoryPerSession": ("kernel_memory", lambda size: max(parse_size(size) >> 20, 1)),
    "maxCpuTimePerSession": ("kernel_cpu_time", lambda ms: max(int(ms) // 1000, 1)),
    "allowNetworkAccess": ("kernel_network", bool),
    "sandbox": ("sandbox", bool),
    "persistSessions": ("persist_sessions", bool),
    "storageDirectory": ("root", str),  # the sessions' folder: they are notebooks in the root
}


def read_srcbook_json(path: Path) -> dict[str, Any]:
    """Read a ``srcbook-mcp.json`` (Srcbook's MCP server configuration): its ``options`` become
    settings (times in milliseconds, sizes like "512MB"; ``storageDirectory``, the sessions'
    folder, is the root, relative to the file); the descriptive keys (name, version,
    capabilities…) are ignored."""
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
    return out


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
    return Settings(**values)
