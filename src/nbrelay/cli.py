"""The ``nbrelay`` command: ``serve`` (the MCP server), ``demo`` and ``tools``.

``main(argv) -> int`` is testable in process. While serving over stdio, stdout belongs to the
MCP protocol: nothing here writes to it except the non-serving commands.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbrelay import __version__
from nbrelay.config import OPTIONS, TOKEN_ENV, RedactSecrets, Settings, load, read_toml
from nbrelay.errors import NbrelayError


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="TOML file with settings (keys as below), or a srcbook-mcp.json.",
    )
    for opt in OPTIONS:
        kwargs: dict[str, Any] = {"dest": opt.name, "default": None, "help": opt.help}
        if opt.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["metavar"] = opt.name.upper()
            if opt.choices:
                kwargs["choices"] = opt.choices
        parser.add_argument(opt.flag, **kwargs)
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="Log level for messages on stderr.",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    return parser


def settings_from(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Settings:
    flags = {opt.name: getattr(args, opt.name, None) for opt in OPTIONS}
    toml = read_toml(args.config) if getattr(args, "config", None) else None
    return load(flags, os.environ if environ is None else environ, toml)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from nbrelay.demo import run_demo

            return run_demo(args.dir)
        settings = settings_from(args)
        logging.basicConfig(
            level=args.log_level, stream=sys.stderr, format="nbrelay %(levelname)s %(message)s"
        )
        for handler in logging.getLogger().handlers:  # no level logs a credential
            handler.addFilter(RedactSecrets())
        if args.command == "tools":
            return _print_tools(settings, as_json=args.json)
        return _serve(settings)
    except NbrelayError as exc:
        sys.stderr.write(f"nbrelay: {exc}\n")
        return 2


def _serve(settings: Settings) -> int:
    # Read once into Settings; kernels and other children must never inherit the token.
    os.environ.pop(TOKEN_ENV, None)
    # Start-up makes some hundred thousand long-lived objects (the SDK's and the tools' models);
    # the cycle collector scanning them over and over would be a tenth of start-up and find
    # little. It stays off until the server has answered its first requests.
    gc.disable()
    _settle_after(SETTLE_SECONDS)
    if settings.http:
        import anyio

        from nbrelay.transport import serve

        anyio.run(serve, settings)
        return 0
    from nbrelay.server import build_server

    server = build_server(settings)
    server.run("stdio")
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
    for t in tools:
        first = (t.description or "").splitlines()[0] if t.description else ""
        sys.stdout.write(f"{t.name:22} {first}\n")
    return 0
