"""The server's contents manager, called in process behind the ``JupyterAPI`` contents methods.

``stores.contents.ContentsStore`` and ``stores.live_extras`` speak to a Jupyter Server through
five contents calls of ``JupyterAPI``; inside the server those calls go straight to its contents
manager (no HTTP), with the same models (JSON-like: times as ISO strings) and the same errors
(404 is ``NotebookNotFound``, 409 ``NotebookExists``, others ``RemoteError``). Who may make
these calls is decided above them, once per operation of the store, about the caller that
operation is handed (``extension.store``): the calls here take no caller.

**Confinement.** Jupyter's contents manager follows symlinks (a link in its root is served as
whatever it points to), and jupyter-collaboration loads rooms through it. Every path nbrelay
hands to Jupyter (contents calls here, rooms in ``app``) first passes file mode's path rules
(``Confinement``: ``stores.rootdir.Root``): a path that leads outside the root or to a hidden
file is refused, whatever tool or profile gave it; a listing keeps only what is inside.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.services.contents.fileio import FileManagerMixin
from tornado import web

from nbrelay.errors import NbrelayError, PathError, RemoteError
from nbrelay.jupyter_api import JupyterAPI, Response
from nbrelay.stores.rootdir import Root


def _plain(value: Any) -> Any:
    """A contents model as the REST API would send it (datetimes as ISO 8601 strings)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


class Confinement:
    """File mode's path rules for the server paths nbrelay hands to Jupyter (see the module
    docstring). A contents manager whose files are not on this machine has no symlinks: only
    the rules every store applies to the text of a path (``stores.paths``) hold there."""

    def __init__(self, contents_manager: Any) -> None:
        root = getattr(contents_manager, "root_dir", None)
        self.root = (
            Root(Path(root))
            if isinstance(contents_manager, FileManagerMixin) and isinstance(root, str)
            else None
        )

    def check(self, path: str) -> str | None:
        """The real path of server path ``path`` (None when not on this machine), or a
        ``PathError`` when it leads outside the root, to a hidden file or to something that is
        neither a regular file nor a folder."""
        if self.root is None:
            return None
        if not path.strip("/"):
            return self.root.root_s
        # One lstat per part below the root, unless a part is a link (``Root.resolve_stat``).
        _, real, found = self.root.resolve_stat(path, suffix="")
        if found is None:
            return real  # not there (yet)
        mode = found.st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise PathError(
                f"{path!r} is not a regular file or folder (a FIFO, a device or a socket).",
                hint="Only regular files are served.",
            )
        return real

    def verify(self, path: str, real: str | None, model: Mapping[str, Any]) -> None:
        """Check that content the contents manager read is the file's at ``real`` (read
        again through descriptors, never through a symlink swapped in meanwhile)."""
        digest, algorithm = model.get("hash"), model.get("hash_algorithm")
        if self.root is None or real is None or not digest or not isinstance(algorithm, str):
            return
        data, _ = self.root.read_bytes(real, path)
        if hashlib.new(algorithm, data).hexdigest() != digest:
            raise PathError(
                f"{path!r} changed while it was being read (rewritten, or a folder on its path "
                "replaced by a symlink); nothing of it is returned.",
                hint="Retry in a moment.",
            )

    def inside(self, path: str, real: str | None, children: list[Any]) -> list[Any]:
        """The entries of a folder listing that are in the folder at ``real`` and inside the
        root (a link out of the root, or to a hidden file, is left out as file mode does)."""
        if self.root is None or real is None:
            return children
        fd = self.root.open_folder(real)
        try:
            names = set(os.listdir(fd))
        finally:
            os.close(fd)
        kept = []
        for child in children:
            if not isinstance(child, dict) or child.get("name") not in names:
                continue
            try:
                self.check(str(child.get("path", "")))
            except NbrelayError:
                continue
            kept.append(child)
        return kept


class ServerContents(JupyterAPI):
    """The contents part of ``JupyterAPI``, answered by the server's own contents manager."""

    def __init__(self, contents_manager: Any, base_url: str = "http://127.0.0.1/") -> None:
        super().__init__(base_url, None)
        self.cm = contents_manager
        self.origin = "this Jupyter Server"
        self.label = "this Jupyter Server"
        self.confinement = Confinement(contents_manager)
        # Every in-process server has the same base URL: what nbrelay keeps per server on disk
        # (readers' last reads, undo, run journals) is keyed by its contents root instead.
        root = getattr(contents_manager, "root_dir", None)
        if isinstance(root, str) and root:
            self.identity = f"server-root:{os.path.realpath(root)}"

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            result: Awaitable[Any] | Any = fn(*args, **kwargs)
            return await ensure_async(result)
        except web.HTTPError as exc:
            raise self._status_error(exc.status_code, None, exc.log_message or "", what) from exc

    async def get_contents(
        self, path: str, *, content: bool = True, hash: bool = False, type: str | None = None
    ) -> dict[str, Any]:
        real = self.confinement.check(path)
        # Content read through a path is checked against the file's own bytes (its hash).
        verify = content and real is not None
        model = await self._call(
            repr(path), self.cm.get, path, content=content, type=type, require_hash=hash or verify
        )
        if model.get("type") == "directory" and isinstance(model.get("content"), list):
            model["content"] = self.confinement.inside(path, real, model["content"])
        elif verify:
            self.confinement.verify(path, real, model)
        return dict(_plain(model))

    async def exists(self, path: str) -> bool:
        self.confinement.check(path)
        return bool(await self._call(repr(path), self.cm.exists, path))

    async def save_contents(self, path: str, model: Mapping[str, Any]) -> dict[str, Any]:
        self.confinement.check(path)
        saved = await self._call(repr(path), self.cm.save, dict(model), path)
        return dict(_plain(saved or {}))

    async def make_folders(self, folder: str) -> None:
        parts = [p for p in folder.split("/") if p]
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            self.confinement.check(sub)
            if not await self._call(sub, self.cm.dir_exists, sub):
                await self._call(sub, self.cm.save, {"type": "directory"}, sub)

    async def delete_contents(self, path: str) -> None:
        self.confinement.check(path)
        await self._call(repr(path), self.cm.delete, path)

    async def rename_contents(self, src: str, dst: str) -> dict[str, Any]:
        self.confinement.check(src)
        self.confinement.check(dst)
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
