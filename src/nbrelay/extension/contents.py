"""The server's contents manager, called in process behind the ``JupyterAPI`` contents methods.

``stores.contents.ContentsStore`` and ``stores.live_extras`` speak to a Jupyter Server through
five contents calls of ``JupyterAPI``; inside the server those calls go straight to its contents
manager (no HTTP), with the same models (JSON-like: times as ISO strings) and the same errors
(404 is ``NotebookNotFound``, 409 ``NotebookExists``, others ``RemoteError``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from jupyter_core.utils import ensure_async
from tornado import web

from nbrelay.errors import RemoteError
from nbrelay.extension.access import require
from nbrelay.jupyter_api import JupyterAPI, Response


def _plain(value: Any) -> Any:
    """A contents model as the REST API would send it (datetimes as ISO 8601 strings)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


class ServerContents(JupyterAPI):
    """The contents part of ``JupyterAPI``, answered by the server's own contents manager."""

    def __init__(self, contents_manager: Any, base_url: str = "http://127.0.0.1/") -> None:
        super().__init__(base_url, None)
        self.cm = contents_manager
        self.origin = "this Jupyter Server"

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            result: Awaitable[Any] | Any = fn(*args, **kwargs)
            return await ensure_async(result)
        except web.HTTPError as exc:
            raise self._status_error(exc.status_code, None, exc.log_message or "", what) from exc

    async def get_contents(
        self, path: str, *, content: bool = True, hash: bool = False, type: str | None = None
    ) -> dict[str, Any]:
        await require("read", "contents")
        model = await self._call(
            repr(path), self.cm.get, path, content=content, type=type, require_hash=hash
        )
        return dict(_plain(model))

    async def exists(self, path: str) -> bool:
        await require("read", "contents")
        return bool(await self._call(repr(path), self.cm.exists, path))

    async def save_contents(self, path: str, model: Mapping[str, Any]) -> dict[str, Any]:
        await require("write", "contents")
        saved = await self._call(repr(path), self.cm.save, dict(model), path)
        return dict(_plain(saved or {}))

    async def make_folders(self, folder: str) -> None:
        await require("write", "contents")
        parts = [p for p in folder.split("/") if p]
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            if not await self._call(sub, self.cm.dir_exists, sub):
                await self._call(sub, self.cm.save, {"type": "directory"}, sub)

    async def delete_contents(self, path: str) -> None:
        await require("write", "contents")
        await self._call(repr(path), self.cm.delete, path)

    async def rename_contents(self, src: str, dst: str) -> dict[str, Any]:
        await require("write", "contents")
        await self._call(repr(src), self.cm.rename, src, dst)
        return await self.get_contents(dst, content=False)

    async def request(self, method: str, path: str, **kwargs: Any) -> Response:
        raise RemoteError(
            f"nbrelay's server extension calls no REST API of its own server ({method} {path}).",
            hint="This is a bug in nbrelay; please report it.",
        )

    async def collaboration_session(self, path: str) -> dict[str, Any] | None:
        return None

    async def aclose(self) -> None:
        return None
