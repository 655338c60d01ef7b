"""The one client of a Jupyter Server: its REST API and its WebSockets, with the token and errors.

Everything nbrelay asks a Jupyter Server (JupyterLab, Jupyter Server, Kernel Gateway, Enterprise
Gateway) goes through ``JupyterAPI``:

* **One origin.** Every request is built from the configured base URL and a quoted API path, so
  the token is only ever sent to that server. Redirects are not followed. The token travels in
  the ``Authorization`` header, never in a URL, and is never logged.
* **XSRF.** Requests that carry a token need no XSRF cookie; a server without a token asks for
  one, and the client fetches it once and sends it back as ``X-XSRFToken``.
* **Errors.** httpx2 and websockets exceptions stop here and become ``RemoteError`` (or
  ``NotebookNotFound`` / ``PathError``) naming the server and the next step.

httpx2 (already installed by the MCP SDK) and websockets are imported when first used, so file
mode never loads them.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import anyio

from nbrelay.config import Secret
from nbrelay.errors import (
    NotebookExists,
    NotebookNotFound,
    RemoteError,
    act,
)
from nbrelay.jupyter_api.address import api_path as api_path
from nbrelay.jupyter_api.address import base_url as base_url
from nbrelay.jupyter_api.address import load_token as load_token
from nbrelay.jupyter_api.address import probe as probe

if TYPE_CHECKING:
    import httpx2
    from websockets.asyncio.client import ClientConnection

logger = logging.getLogger("nbrelay.jupyter")

MAX_MESSAGE = 512 * 1024 * 1024
_MAX_ERROR_TEXT = 300


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_TEXT else text[: _MAX_ERROR_TEXT - 1] + "…"


class Response:
    """A finished response: status, parsed JSON (or None) and headers."""

    def __init__(self, status: int, body: Any, headers: Mapping[str, str]) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    def json(self) -> Any:
        return self.body


def ack_at_once(ws: ClientConnection) -> None:
    """Have this machine acknowledge what arrived on ``ws`` at once (call after each message).

    Jupyter Server (tornado) writes WebSocket frames without TCP_NODELAY, so a second small
    frame waits until the first is acknowledged (Nagle's algorithm), and Linux delays that
    acknowledgement by up to 40 ms: every answer the server sends in two frames (an edit's echo
    and its sync reply, a kernel's reply and its status) stalled about 40 ms. Linux leaves
    quick-acknowledgement mode on its own, hence once per message. Elsewhere, a no-op."""
    ack_socket_at_once(ws.transport.get_extra_info("socket"))


def ack_socket_at_once(sock: Any) -> None:
    """``ack_at_once`` for the socket of any connection (None: nothing to do)."""
    import socket

    quickack = getattr(socket, "TCP_QUICKACK", None)
    if quickack is None or sock is None:
        return
    with contextlib.suppress(OSError):  # not TCP (a Unix socket), or already closed
        sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)


class JupyterAPI:
    """A Jupyter Server at one base URL, with one token. Close it with ``aclose``."""

    def __init__(self, url: str, token: Secret | None, *, timeout: float = 30.0) -> None:
        self.base = base_url(url)
        # Which server this is, for what nbrelay keeps about it on disk (its URL by default).
        self.identity = self.base
        # Whether ``GET api/kernels`` lists the kernels (a Kernel Gateway may refuse it).
        self.lists_kernels = True
        # Whether the server's rooms answer a request to save (jupyter-collaboration 4.1 and
        # later; older ones only save on their own): None until a save told.
        self.answers_saves: bool | None = None
        parts = urlsplit(self.base)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.label = f"Jupyter Server at {self.origin}"  # how messages name the server
        ws_scheme = "wss" if parts.scheme == "https" else "ws"
        self.ws_base = urlunsplit((ws_scheme, parts.netloc, parts.path, "", ""))
        self._token = token
        self.timeout = timeout
        self._client: httpx2.AsyncClient | None = None
        self._xsrf: str | None = None

    # -- plumbing ---------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"token {self._token.reveal()}"
        return headers

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            import httpx2

            self._client = httpx2.AsyncClient(
                base_url=self.base,
                headers=self._headers(),
                timeout=self.timeout,
                follow_redirects=False,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _unreachable(self, exc: Exception) -> RemoteError:
        import httpx2

        if isinstance(exc, httpx2.TimeoutException):
            return RemoteError(
                f"{self.label} did not answer within {self.timeout:g} s.",
                hint="Check that it is running and not overloaded, then retry.",
            )
        return RemoteError(
            f"cannot reach {self.label} ({type(exc).__name__}).",
            hint="Check that it is running and that --jupyter-url is right "
            "(`jupyter server list` shows the address).",
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        ok: tuple[int, ...] = (200, 201, 204),
        what: str = "",
    ) -> Response:
        """Send one API request (``path`` below the base URL, already quoted).

        Raises:
            RemoteError: the server is unreachable, refused the token, or answered another
                status than ``ok`` (404 is ``NotebookNotFound``, 409 ``NotebookExists``).
        """
        import httpx2

        client = self._http()
        headers: dict[str, str] = {}
        content: bytes | None = None
        if body is not None:
            content = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        for attempt in range(2):
            if self._xsrf and method not in ("GET", "HEAD"):
                headers["X-XSRFToken"] = self._xsrf
            try:
                resp = await client.request(
                    method, path, params=params, content=content, headers=headers
                )
            except httpx2.HTTPError as exc:
                raise self._unreachable(exc) from exc
            if (
                resp.status_code == 403
                and attempt == 0
                and method not in ("GET", "HEAD")
                and "xsrf" in resp.text.lower()
                and await self._fetch_xsrf()
            ):
                continue
            break
        try:
            parsed: Any = resp.json() if resp.content else None
        except ValueError:
            parsed = None
        if resp.status_code in ok:
            return Response(resp.status_code, parsed, resp.headers)
        raise self._status_error(resp.status_code, parsed, resp.text, what or path)

    async def _fetch_xsrf(self) -> bool:
        """Get the ``_xsrf`` cookie a server without a token wants on writing requests."""
        import httpx2

        client = self._http()
        try:
            await client.get("login", headers={"Accept": "text/html"})
        except httpx2.HTTPError as exc:
            raise self._unreachable(exc) from exc
        value = client.cookies.get("_xsrf")
        if value:
            self._xsrf = value
            return True
        return False

    def _status_error(self, status: int, body: Any, text: str, what: str) -> Exception:
        message = ""
        if isinstance(body, dict):
            message = str(body.get("message") or body.get("reason") or "")
        detail = _short(message or text or "")
        if status in (401, 403):
            return RemoteError(
                f"{self.label} refused the request ({status}{': ' + detail if detail else ''}).",
                hint="Give nbrelay the server's token in $JUPYTER_TOKEN or --jupyter-token-file "
                "(`jupyter server list` shows it).",
            )
        if status == 404:
            return NotebookNotFound(
                f"{what} does not exist on the Jupyter Server.",
                hint=act("missing"),
            )
        if status == 409:
            return NotebookExists(
                f"{what} already exists on the Jupyter Server.", hint="Pick another path."
            )
        return RemoteError(
            f"{self.label} answered {status} for {what}{': ' + detail if detail else ''}.",
            hint="Check the server's log; retry once the problem is fixed.",
        )

    # -- contents ---------------------------------------------------------------------------

    async def get_contents(
        self, path: str, *, content: bool = True, hash: bool = False, type: str | None = None
    ) -> dict[str, Any]:
        """``GET /api/contents/<path>``: a file or directory model."""
        params = {"content": "1" if content else "0"}
        if hash:
            params["hash"] = "1"
        if type:
            params["type"] = type
        resp = await self.request(
            "GET", api_path("api/contents", path), params=params, ok=(200,), what=repr(path)
        )
        if not isinstance(resp.body, dict):
            raise RemoteError(f"Jupyter Server sent an unreadable contents model for {path!r}.")
        return resp.body

    async def exists(self, path: str) -> bool:
        try:
            await self.get_contents(path, content=False)
        except NotebookNotFound:
            return False
        return True

    async def save_contents(self, path: str, model: Mapping[str, Any]) -> dict[str, Any]:
        """``PUT /api/contents/<path>``: write a whole file (never while a room may be open)."""
        resp = await self.request(
            "PUT", api_path("api/contents", path), body=dict(model), what=repr(path)
        )
        return resp.body if isinstance(resp.body, dict) else {}

    async def make_folders(self, folder: str) -> None:
        """Create ``folder`` and its parents on the server (existing ones are kept)."""
        parts = [p for p in folder.split("/") if p]
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            if not await self.exists(sub):
                await self.request(
                    "PUT", api_path("api/contents", sub), body={"type": "directory"}, what=sub
                )

    async def delete_contents(self, path: str) -> None:
        await self.request("DELETE", api_path("api/contents", path), what=repr(path))

    async def rename_contents(self, src: str, dst: str) -> dict[str, Any]:
        resp = await self.request(
            "PATCH", api_path("api/contents", src), body={"path": dst}, what=repr(src)
        )
        return resp.body if isinstance(resp.body, dict) else {}

    # -- real-time collaboration --------------------------------------------------------------

    async def collaboration_session(self, path: str) -> dict[str, Any] | None:
        """``PUT /api/collaboration/session/<path>``: the room of a notebook.

        Returns ``{"fileId", "sessionId", ...}``, or None when the server has no real-time
        collaboration. jupyter-server-documents (the other server side of it, in Jupyter AI's
        ``rtc-jsd`` deployments) has no such endpoint: its rooms are named by the file id that
        ``POST /api/fileid/index?path=<path>`` gives, as its JupyterLab page finds them, and
        take no session id (``"sessionId": ""``).

        Raises:
            NotebookNotFound: the notebook does not exist.
        """
        try:
            resp = await self.request(
                "PUT",
                api_path("api/collaboration/session", path),
                body={"format": "json", "type": "notebook"},
                ok=(200, 201),
                what=repr(path),
            )
        except NotebookNotFound:
            if await self.exists(path):
                return await self._indexed_room(path)  # the endpoint is missing
            raise
        if not isinstance(resp.body, dict) or "fileId" not in resp.body:
            return None
        return resp.body

    async def _indexed_room(self, path: str) -> dict[str, Any] | None:
        """The room of ``path`` on jupyter-server-documents (see ``collaboration_session``),
        or None when the server has no file-id index either (no collaboration)."""
        from urllib.parse import urlencode

        try:
            resp = await self.request(
                "POST",
                "api/fileid/index?" + urlencode({"path": path}),
                ok=(200, 201),
                what=repr(path),
            )
        except (NotebookNotFound, RemoteError):
            return None
        found = resp.body.get("id") if isinstance(resp.body, dict) else None
        if not isinstance(found, str) or not found:
            return None
        return {"fileId": found, "sessionId": "", "server": "jupyter-server-documents"}

    # -- WebSockets ---------------------------------------------------------------------------

    @asynccontextmanager
    async def websocket(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        subprotocols: tuple[str, ...] = (),
        keepalive: bool = True,
    ) -> AsyncIterator[ClientConnection]:
        """Open a WebSocket to ``path`` (below the base URL, already quoted). With
        ``keepalive``, a server that answers no ping for 20 s is taken for gone (the connection
        closes); without, the connection waits on a server busy answering an earlier message
        (Tornado reads no frame, pings included, until its handler of a message returns).

        Raises:
            RemoteError: the server refused the upgrade or could not be reached.
        """
        from urllib.parse import urlencode

        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus
        from websockets.typing import Subprotocol

        url = self.ws_base + path
        if params:
            url += "?" + urlencode(dict(params))
        headers = {k: v for k, v in self._headers().items() if k != "Accept"}
        try:
            ws = await connect(
                url,
                additional_headers=headers,
                max_size=MAX_MESSAGE,
                max_queue=None,
                open_timeout=self.timeout,
                ping_interval=20 if keepalive else None,
                ping_timeout=20,
                close_timeout=5,
                compression=None,
                subprotocols=[Subprotocol(s) for s in subprotocols] or None,
                user_agent_header="nbrelay",
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            body = exc.response.body or b""
            raise self._status_error(
                status, None, body.decode("utf-8", "replace"), "the WebSocket " + path
            ) from exc
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise RemoteError(
                f"cannot open a WebSocket to {self.label} ({type(exc).__name__}).",
                hint="Check that the server is running and reachable, then retry.",
            ) from exc
        try:
            yield ws
        finally:
            with anyio.move_on_after(5, shield=True):
                await ws.close()
