"""The ``nbrelay`` command: ``serve`` (the MCP server), ``demo`` and ``tools``.

``main(argv) -> int`` is testable in process. While serving over stdio, stdout belongs to the
MCP protocol: nothing here writes to it except the non-serving commands.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nbrelay import __version__, process
from nbrelay.config import (
    JUPYTER_TOKEN_ENV,
    OPTIONS,
    TOKEN_ENV,
    Option,
    RedactSecrets,
    Secret,
    Settings,
    is_credential_name,
    load,
    read_toml,
)
from nbrelay.errors import InvalidArgument, NbrelayError


class _Switch(argparse.Action):
    """A boolean option and its opposite, each a flag of its own: ``--read-only`` /
    ``--no-read-only``, and for an option named as a negation ``--no-execute`` / ``--execute``
    (argparse's BooleanOptionalAction would read ``--no-execute`` as "off" and offer
    ``--no-no-execute``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.on = option_strings[0]

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, option_string == self.on)

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


def switch_flags(opt: Option) -> tuple[str, str]:
    """A boolean option's flags: the one that turns it on, and the one that turns it off."""
    if opt.name.startswith("no_"):
        return opt.flag, "--" + opt.name[3:].replace("_", "-")
    return opt.flag, "--no-" + opt.name.replace("_", "-")


def _help(text: str) -> str:
    """argparse formats help with ``%``: a literal ``%`` in a help string must be doubled."""
    return text.replace("%", "%%")


def default_text(opt: Option) -> str:
    """`` (default: …)`` for an option's help, unless its help already says what the default
    is. The parser's own defaults stay None, so that ``settings`` can tell a flag given from
    one left out."""
    if "default:" in opt.help:
        return ""
    value = opt.default
    if opt.kind is bool:
        shown = "on" if value else "off"
    elif value is None or value == ():
        shown = "none"
    elif isinstance(value, float):
        shown = f"{value:g}"
    else:
        shown = str(value)
    return f" (default: {shown})"


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="TOML file with settings (keys as below), or a srcbook-mcp.json (default: none).",
    )
    for opt in OPTIONS:
        kwargs: dict[str, Any] = {
            "dest": opt.name,
            "default": None,
            "help": _help(opt.help + default_text(opt)),
        }
        if opt.kind is bool:
            parser.add_argument(*switch_flags(opt), action=_Switch, **kwargs)
            continue
        kwargs["metavar"] = opt.name.upper()
        if opt.choices:
            kwargs["choices"] = opt.choices
        parser.add_argument(opt.flag, **kwargs)
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=LOG_LEVELS,
        help="Log level for messages on stderr (default: WARNING).",
    )


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Parser(argparse.ArgumentParser):
    """The top-level parser: words no subcommand takes get a message of their own (see
    ``unknown_words``) instead of argparse's, which repeats them all."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(unknown_words(self, parsed, extra))
        return parsed


def unknown_words(
    parser: argparse.ArgumentParser, parsed: argparse.Namespace, extra: Sequence[str]
) -> str:
    """What is wrong with the words a command does not take: each unknown option by its name
    with the nearest real one ("did you mean --root?", as Python 3.14's suggest_on_error does;
    3.11 has none), and the other words only counted, never repeated: after a mistyped
    ``--token`` the next word is a secret, and error output ends up in logs and terminals."""
    command = getattr(parsed, "command", None)
    sub = _subparsers(parser).get(command) if command else None
    known = sorted(
        s for a in (sub or parser)._actions for s in a.option_strings if s.startswith("--")
    )
    where = f"nbrelay {command}" if command else "nbrelay"
    parts: list[str] = []
    secret = False
    values = 0
    for word in extra:
        if word == "--":
            continue
        if not word.startswith("-") or word == "-" or _NUMBER.fullmatch(word):
            values += 1
            continue
        name = word.split("=", 1)[0]
        values += name != word
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        parts.append(f"{name} (did you mean {near[0]}?)" if near else name)
        secret |= is_credential_name(name.lstrip("-"))
    counted = f"{values} value{'s' * (values > 1)} (not repeated here)"
    if parts:
        text = f"{where} has no option {', '.join(parts)}"
        text += f", and does not take {counted}." if values else "."
    else:
        text = f"{where} does not take {counted}."
    text += f" `{where} --help` lists what it takes."
    if secret:
        text += (
            f" Tokens are never given on the command line (every user of the machine can read "
            f"it): set ${TOKEN_ENV} or use --token-file (--jupyter-token-file for Jupyter's)."
        )
    return text


_NUMBER = re.compile(r"-\d+(\.\d*)?")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nbrelay",
        description="An MCP server that lets agents work in Jupyter notebooks.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"nbrelay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="Serve notebooks over MCP (stdio, or streamable HTTP with --http).",
        allow_abbrev=False,
    )
    _add_options(serve)
    demo = sub.add_parser(
        "demo", help="Start the server over stdio and drive it through a short session."
    )
    demo.add_argument(
        "--dir", type=Path, default=Path("nbrelay-demo"), help="Folder for the demo notebook."
    )
    tools = sub.add_parser("tools", help="Print the tools a profile exposes.", allow_abbrev=False)
    _add_options(tools)
    tools.add_argument("--json", action="store_true", help="Print the full tools/list JSON.")
    shown = sub.add_parser(
        "settings",
        help="Print the settings serve would run with, and where each one came from.",
        allow_abbrev=False,
    )
    _add_options(shown)
    shown.add_argument(
        "--json", action="store_true", help='Print JSON: {"settings": {...}, "from": {...}}.'
    )
    return parser


def settings_from(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    origins: dict[str, str] | None = None,
) -> Settings:
    flags = {opt.name: getattr(args, opt.name, None) for opt in OPTIONS}
    toml = read_toml(args.config) if getattr(args, "config", None) else None
    return load(flags, os.environ if environ is None else environ, toml, origins)


# Tokens nbrelay may find in its environment. A process's initial environment stays readable in
# /proc/<pid>/environ (by its kernels, say) however os.environ changes; so ``nbrelay serve``
# started with one there runs itself again without it, and reads it from an inherited pipe.
SECRET_ENVS = (TOKEN_ENV, JUPYTER_TOKEN_ENV)
SECRETS_FD_ENV = "NBRELAY_SECRETS_FD"
_MAX_SECRETS = 32 * 1024  # what a pipe takes without a reader


def reexec_without_secrets() -> None:
    """If a token is in the environment, run this same command again (``execve``, same process)
    with an environment that lacks it, handing the tokens over through a pipe that only the new
    program reads. Returns only when there is nothing to hide (or no way to)."""
    found = {k: os.environ[k] for k in SECRET_ENVS if k in os.environ}
    data = json.dumps(found).encode("utf-8")
    if not found or os.name != "posix" or len(data) > _MAX_SECRETS or not sys.orig_argv:
        return
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    os.set_inheritable(read_end, True)
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENVS}
    env[SECRETS_FD_ENV] = str(read_end)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)  # noqa: S606 - this very program, as it was started


def take_secrets() -> dict[str, str]:
    """The tokens handed over by ``reexec_without_secrets`` (none if it did not run)."""
    fd_text = os.environ.pop(SECRETS_FD_ENV, None)
    if fd_text is None:
        return {}
    try:
        fd = int(fd_text)
        with os.fdopen(fd, "rb") as pipe:
            found = json.loads(pipe.read(_MAX_SECRETS + 1))
    except (ValueError, OSError) as exc:
        raise InvalidArgument(
            f"${SECRETS_FD_ENV} does not name a readable pipe of tokens ({exc}).",
            hint=f"nbrelay sets ${SECRETS_FD_ENV} itself; unset it.",
        ) from exc
    if not isinstance(found, dict):
        raise InvalidArgument(f"${SECRETS_FD_ENV} did not carry tokens.")
    return {k: str(v) for k, v in found.items() if k in SECRET_ENVS}


def no_dumps() -> None:
    """Make this process non-dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``, as ssh-agent does):
    other processes of the same user, kernels included, can then no longer read its memory
    (``/proc/<pid>/mem``), its environment or attach a debugger; only root can. Children get
    the normal setting back when they start a program."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):  # pragma: no cover - no prctl here
        logging.getLogger("nbrelay").warning("could not make the process non-dumpable")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from nbrelay.demo import run_demo

            return run_demo(args.dir)
        origins: dict[str, str] = {}
        environ: Mapping[str, str] = os.environ
        if argv is None and args.command == "serve":  # the program itself, not a test calling in
            reexec_without_secrets()
            environ = {**os.environ, **take_secrets()}
        settings = settings_from(args, environ, origins=origins)
        logging.basicConfig(
            level=args.log_level, stream=sys.stderr, format="nbrelay %(levelname)s %(message)s"
        )
        for handler in logging.getLogger().handlers:  # no level logs a credential
            handler.addFilter(RedactSecrets())
        if args.command == "tools":
            return _print_tools(settings, as_json=args.json)
        if args.command == "settings":
            return _print_settings(settings, origins, as_json=args.json)
        return _serve(settings)
    except NbrelayError as exc:
        sys.stderr.write(f"nbrelay: {exc}\n")
        return 2


def _serve(settings: Settings) -> int:
    process.setup()  # first, before any thread starts
    # Read once into Settings; kernels and other children must never inherit the tokens.
    for name in SECRET_ENVS:
        os.environ.pop(name, None)
    if settings.http or settings.jupyter_url or settings.kernel_gateway_url:
        no_dumps()  # the modes that hold a token: keep it out of reach of same-user processes
    # Start-up makes some hundred thousand long-lived objects (the SDK's and the tools' models);
    # the cycle collector scanning them over and over would be a tenth of start-up and find
    # little. It stays off until the server has answered its first requests.
    gc.disable()
    _settle_after(SETTLE_SECONDS)
    import anyio

    if settings.http:
        from nbrelay.transport import serve

        anyio.run(serve, settings)
        return 0
    from nbrelay import stdio
    from nbrelay.server import build_server

    anyio.run(stdio.serve, build_server(settings))
    return 0


SETTLE_SECONDS = 3.0


def _settle_after(delay: float) -> None:
    """After ``delay``: collect once what start-up left, keep the survivors out of every later
    collection (which makes those shorter), and turn the collector back on."""

    def settle() -> None:
        gc.collect()
        gc.freeze()
        gc.enable()

    timer = threading.Timer(delay, settle)
    timer.daemon = True
    timer.start()


def _print_tools(settings: Settings, *, as_json: bool) -> int:
    import anyio

    from nbrelay.server import build_server

    server = build_server(settings)
    tools = anyio.run(server.list_tools)
    if as_json:
        dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        sys.stdout.write(json.dumps(dumped, indent=1) + "\n")
        return 0
    for t in tools:  # the description's first paragraph, on one line
        first = " ".join((t.description or "").split("\n\n", 1)[0].split())
        sys.stdout.write(f"{t.name:22} {first}\n")
    return 0


def _plain(opt: Option, value: Any) -> Any:
    """A setting's value as JSON shows it; secrets are never shown."""
    if value is not None and (opt.secret or isinstance(value, Secret)):
        return "<hidden>"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _print_settings(settings: Settings, origins: Mapping[str, str], *, as_json: bool) -> int:
    values = {opt.name: _plain(opt, getattr(settings, opt.name)) for opt in OPTIONS}
    secrets = {
        "token": "$NBRELAY_TOKEN" if settings.token is not None else None,
        "jupyter_token": "$JUPYTER_TOKEN" if settings.jupyter_token is not None else None,
    }
    if as_json:
        found = {**origins, **{k: v for k, v in secrets.items() if v is not None}}
        shown = {**values, **{k: "<hidden>" for k, v in secrets.items() if v is not None}}
        sys.stdout.write(
            json.dumps({"settings": shown, "from": found}, indent=1, default=str) + "\n"
        )
        return 0
    for name, value in values.items():
        shown_value = json.dumps(value, default=str)
        sys.stdout.write(f"{name:22} {shown_value}  ({origins.get(name, 'default')})\n")
    for name, where in secrets.items():
        if where is not None:
            sys.stdout.write(f"{name:22} <hidden>  ({where})\n")
    return 0
