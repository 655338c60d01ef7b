"""The server extension: settings as traits, the workspace over the server's managers, and the
``{base_url}mcp`` handler that relays each authenticated request to the MCP SDK's streamable
HTTP session manager (which runs in the server's own event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import threading
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.application import ExtensionApp
from tornado import web
from tornado.iostream import StreamClosedError
from traitlets import Bool, Float, Int, List, TraitError, TraitType, Unicode

from nbrelay import config
from nbrelay.caller import IDENTITY_SCOPE_KEY, JUPYTER_SCOPE_KEY
from nbrelay.config import OPTION_BY_NAME, Option, Settings
from nbrelay.errors import NbrelayError
from nbrelay.extension import ynotebook
from nbrelay.extension.access import JupyterUser, caller_middleware
from nbrelay.extension.collaboration import Collaboration
from nbrelay.extension.kernels import ServerKernels
from nbrelay.extension.store import server_store
from nbrelay.http_access import token_identity

Message = MutableMapping[str, Any]

# The options of nbrelay that mean something inside a Jupyter Server (the rest configure a
# server of nbrelay's own: its folder, port, tokens, or the local kernels it would launch).
EXTENSION_OPTIONS: tuple[str, ...] = (
    "profile",
    "tools",
    "read_only",
    "no_execute",
    "output_schemas",
    "output_budget",
    "undo_depth",
    "browser",
    "export_timeout",
    "max_http_sessions",
    "execution_timeout",
    "max_execution_timeout",
    "execution_wait",
    "interrupt_grace",
    "kernel_idle_timeout",
    "persist_sessions",
    "max_sessions",
    "cell_output_limit",
    "cell_display_limit",
    "notebook",
)


def _trait(opt: Option) -> TraitType[Any, Any]:
    """The traitlets trait of an option (validated again by ``config.load``)."""
    options: dict[str, Any] = {"allow_none": opt.default is None, "help": opt.help}
    trait: TraitType[Any, Any]
    if opt.kind is bool:
        trait = Bool(opt.default, **options)
    elif opt.kind is int:
        trait = Int(opt.default, **options)
    elif opt.kind is float:
        trait = Float(opt.default, **options)
    elif opt.kind is list:
        trait = List(Unicode(), default_value=list(opt.default), help=opt.help)
    else:
        trait = Unicode(None if opt.default is None else str(opt.default), **options)
    return trait.tag(config=True)


class _Relay:
    """The MCP server of one Jupyter Server, and the task that runs its session manager."""

    def __init__(
        self,
        settings: Settings,
        serverapp: Any,
        collab: Collaboration | None,
        *,
        room_idle_close: float,
        room_save_delay: float,
        room_save_pace: float,
    ) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        from nbrelay.server import build_server
        from nbrelay.workspace import Workspace

        self.settings = settings
        self.collab = collab
        # Edits not yet saved are journaled beside the server, for the crash that takes nbrelay
        # down with it (one folder per server root).
        root = Path(serverapp.root_dir).resolve()
        digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
        journal = Path(serverapp.runtime_dir) / "nbrelay-unsaved" / digest
        store = server_store(
            serverapp.contents_manager,
            collab,
            idle_close=room_idle_close,
            save_delay=room_save_delay,
            save_pace=room_save_pace,
            journal=journal,
        )
        kernels = ServerKernels(
            serverapp.session_manager,
            serverapp.kernel_manager,
            serverapp.kernel_spec_manager,
            server_path=store.paths.server,
        )
        self.store = store
        workspace = Workspace(settings, store, kernels=kernels)
        self.server = build_server(settings, workspace)
        self.server.middleware.insert(0, caller_middleware)
        # Host and Origin are Jupyter's to check (its allow_origin, allow_remote_access).
        self.server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_sessions=settings.max_http_sessions,
        )
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()

    async def _run(self) -> None:
        async with self.server.session_manager.run():
            self._ready.set()
            await self._stop.wait()

    async def start(self) -> None:
        if self._task is None:
            if self.collab is not None and self.collab.broken is None:
                # Save the rooms before jupyter-collaboration lets them go when the server stops.
                # (With a release nbrelay cannot work with, the tools still answer: each use of a
                # room refuses, naming what is missing and what to install.)
                self.collab.before_stop(self.save_rooms)
            self._task = asyncio.create_task(self._run())
        ready = asyncio.create_task(self._ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.is_set():
            ready.cancel()
            self._task.result()  # raises what stopped it

    async def handle(self, scope: Message, receive: Any, send: Any) -> None:
        if not self._ready.is_set():
            await self.start()
        await self.server.session_manager.handle_request(scope, receive, send)

    async def save_rooms(self) -> None:
        """Save every room with edits nbrelay made that its file does not hold yet (the rooms'
        own work: it asks no one)."""
        await self.store.save_all()

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.save_rooms()  # without jupyter-collaboration, nothing is pending
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)


class McpHandler(APIHandler):
    """``{base_url}mcp``: MCP over streamable HTTP for authenticated Jupyter users."""

    relay: _Relay

    def initialize(self, relay: _Relay) -> None:
        self.relay = relay
        self._gone = asyncio.Event()
        self._content_type = "application/json"

    def on_connection_close(self) -> None:
        self._gone.set()

    @web.authenticated
    async def get(self) -> None:
        await self._relay()

    @web.authenticated
    async def post(self) -> None:
        await self._relay()

    @web.authenticated
    async def delete(self) -> None:
        await self._relay()

    def _scope(self) -> Message:
        req = self.request
        host, _, port = (req.host or "").rpartition(":")
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": req.version.removeprefix("HTTP/") or "1.1",
            "method": req.method or "GET",
            "scheme": req.protocol,
            "path": "/mcp",
            "raw_path": b"/mcp",
            "root_path": "",
            "query_string": (req.query or "").encode("latin-1"),
            "headers": [
                (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in req.headers.get_all()
            ],
            "client": (req.remote_ip or "", 0),
            "server": (host or req.host or "", int(port) if port.isdigit() else 0),
            JUPYTER_SCOPE_KEY: JupyterUser(self, self.current_user),
            IDENTITY_SCOPE_KEY: self._identity(),
        }

    def _identity(self) -> str:
        """Who sent the request, for a client without an MCP session (``nbrelay.caller``): the
        token it authenticated with, as over ``nbrelay serve --http`` (Jupyter gives a client of
        a shared token a new anonymous user unless it keeps the login cookie), else its Jupyter
        user (a cookie's)."""
        scheme, _, token = (self.request.headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() in ("token", "bearer") and token.strip():
            return token_identity(token.strip())
        return f"user:{getattr(self.current_user, 'username', '')}"

    async def _relay(self) -> None:
        body = self.request.body or b""
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self._gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if self._gone.is_set():
                return
            if message["type"] == "http.response.start":
                self.set_status(int(message["status"]))
                for raw_name, raw_value in message.get("headers") or ():
                    name = bytes(raw_name).decode("latin-1")
                    value = bytes(raw_value).decode("latin-1")
                    if name.lower() == "content-type":
                        self._content_type = value
                    elif name.lower() != "content-length":
                        self.add_header(name, value)
                if self._content_type.startswith("text/event-stream"):
                    self.set_header("Content-Type", self._content_type)
                    self.set_header("Cache-Control", "no-cache")
            elif message["type"] == "http.response.body":
                chunk = bytes(message.get("body") or b"")
                if chunk:
                    self.write(chunk)
                if message.get("more_body"):
                    try:
                        await self.flush()
                    except StreamClosedError:
                        self._gone.set()

        await self.relay.handle(self._scope(), receive, send)
        if not self._finished and not self._gone.is_set():
            self.finish(set_content_type=self._content_type)


_TRAITS: dict[str, Any] = {name: _trait(OPTION_BY_NAME[name]) for name in EXTENSION_OPTIONS}
# Traits become part of a class when it is made: the options' traits live on a base class.
_meta: Any = type(ExtensionApp)
_Options: Any = _meta("_NbrelayOptions", (ExtensionApp,), _TRAITS)


class NbrelayExtension(_Options):  # type: ignore[misc]
    """nbrelay's MCP endpoint inside Jupyter Server (``c.NbrelayExtension.<option> = ...``)."""

    name = "nbrelay"
    description = "nbrelay: MCP (streamable HTTP) at {base_url}mcp for AI agents"
    load_other_extensions = True

    relay: _Relay | None = None

    room_idle_close = Float(
        120.0,
        help="Seconds after which a notebook's room that nbrelay opened (the notebook was "
        "open nowhere) is saved and closed, if it was not used and nobody joined it.",
    ).tag(config=True)

    room_save_delay = Float(
        0.5,
        help="Seconds after nbrelay's last edit in a room (at most 5 s into a burst of edits) "
        "before it has the server save the notebook's file; save_notebook saves at once.",
    ).tag(config=True)

    room_save_pace = Float(
        2.0,
        help="After a save of a room's notebook that took T seconds, nbrelay's next save of it "
        "waits until this many times T have passed: a 10,000-cell notebook's save keeps the "
        "server busy for a second or more, and edits made in between are answered without "
        "waiting behind it. 0 saves as soon as room_save_delay allows.",
    ).tag(config=True)

    linear_notebook_reads = Bool(
        True,
        help="Have jupyter_ydoc convert a notebook's Y document with one read of its cells "
        "(same result; O(cells) where its own conversion is O(cells²)), which "
        "jupyter-collaboration does on every save of every room in this server.",
    ).tag(config=True)

    def settings_from_traits(self) -> Settings:
        """nbrelay's settings from the traits set in Jupyter's config (then $NBRELAY_*)."""
        given = self.config.get(type(self).__name__, {})
        flags = {name: getattr(self, name) for name in EXTENSION_OPTIONS if name in given}
        for name, value in flags.items():
            if isinstance(value, list):  # ["a,b", "c"] (the command line gives one string)
                flags[name] = ",".join(str(v) for v in value)
        env = {k: v for k, v in os.environ.items() if k.startswith("NBRELAY_")}
        wanted = {o.env for o in (OPTION_BY_NAME[n] for n in EXTENSION_OPTIONS)}
        try:
            settings = config.load(flags, {k: v for k, v in env.items() if k in wanted})
        except NbrelayError as exc:
            raise TraitError(f"c.{type(self).__name__}: {exc}") from exc
        root = Path(getattr(self.serverapp, "root_dir", ".") or ".")
        return settings.replace(root=root)

    def initialize_handlers(self) -> None:
        collab = Collaboration.find(self.serverapp)  # jupyter-collaboration's rooms, if any
        if collab is not None:
            collab.check()
            if self.linear_notebook_reads and ynotebook.install():
                self.log.info("nbrelay: notebook rooms are converted in one read of their cells")
        self.relay = _Relay(
            self.settings_from_traits(),
            self.serverapp,
            collab,
            room_idle_close=max(0.1, float(self.room_idle_close)),
            room_save_delay=max(0.0, float(self.room_save_delay)),
            room_save_pace=max(0.0, float(self.room_save_pace)),
        )
        self.handlers.append((r"/mcp", McpHandler, {"relay": self.relay}))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        if self.relay is not None:
            await self.relay.start()
            self.log.info("nbrelay: MCP (streamable HTTP) at %smcp", serverapp.base_url)
            self._stop_on_sigint(serverapp)

    def _stop_on_sigint(self, serverapp: Any) -> None:
        """Stop the server cleanly on SIGINT when Jupyter left it to Python's default.

        Without a terminal on stdin Jupyter installs no SIGINT handler: the signal then ends
        the event loop with KeyboardInterrupt and no shutdown runs (no extension's stop hook,
        no kernel shutdown), while the rooms nbrelay opened keep jupyter-collaboration's
        websocket server task and its store's non-daemon worker thread, so the process never
        exits. SIGINT then stops the server the way SIGTERM does (what JupyterHub configures);
        a second SIGINT interrupts at once.
        """
        stop = getattr(serverapp, "_signal_stop", None)
        if stop is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return  # Jupyter's own handler (a terminal), or someone else's

        def on_sigint(sig: int, frame: Any) -> None:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            stop(sig, frame)

        signal.signal(signal.SIGINT, on_sigint)

    async def stop_extension(self) -> None:
        if self.relay is not None:
            await self.relay.stop()
