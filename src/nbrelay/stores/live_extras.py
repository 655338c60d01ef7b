"""What the document tools need from a Jupyter Server beyond its notebooks.

``ContentsDocuments`` serves files and folders of any kind through the contents API (the
``DocumentStore`` protocol of ``stores/base.py``), with the same path rules as the notebook
stores, asking the store's access check (if it has one: the extension's) about the caller of
each operation first. It works for any live store that exposes its ``api`` (a ``JupyterAPI``) and its ``paths``
(agent paths ↔ server paths); ``for_store`` finds them.
"""

from __future__ import annotations

import base64
import builtins
import json
import mimetypes
import posixpath
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument, NotebookExists
from nbrelay.stores.base import Document
from nbrelay.stores.contents import Paths, normalize
from nbrelay.timestamps import epoch_seconds

if TYPE_CHECKING:
    from nbrelay.jupyter_api import JupyterAPI


def for_store(store: object) -> ContentsDocuments | None:
    """The document service of a live store (one with ``api`` and ``paths``, asking its
    ``allow`` if it has one), else None."""
    from nbrelay.jupyter_api import JupyterAPI

    api, paths = getattr(store, "api", None), getattr(store, "paths", None)
    allow = getattr(store, "allow", None)
    if isinstance(api, JupyterAPI) and isinstance(paths, Paths):
        return ContentsDocuments(api, paths, allow if callable(allow) else None)
    return None


class ContentsDocuments:
    """Files and folders of a Jupyter Server (see the module docstring)."""

    def __init__(
        self,
        api: JupyterAPI,
        paths: Paths,
        allow: Callable[[Caller, str], Awaitable[None]] | None = None,
    ) -> None:
        self.api = api
        self.paths = paths
        self._allow = allow  # refuses a caller "read" or "write" where the server would

    async def _asked(self, caller: Caller, action: str) -> None:
        if self._allow is not None:
            await self._allow(caller, action)

    def _server(self, path: str) -> tuple[str, str]:
        rel = normalize(path, suffix="")
        return rel, self.paths.server(rel)

    def _document(self, model: dict[str, Any]) -> Document:
        name = str(model.get("name", ""))
        # By extension: a server with jupytext calls Markdown and scripts "notebook" too.
        kind: Literal["notebook", "file", "directory"] = "file"
        if model.get("type") == "directory":
            kind = "directory"
        elif name.endswith(".ipynb"):
            kind = "notebook"
        mime = None
        if kind == "file":
            mime = model.get("mimetype") or mimetypes.guess_type(name)[0]
            mime = mime or "application/octet-stream"
        return Document(
            path=self.paths.back(str(model.get("path", ""))),
            name=name,
            type=kind,
            size=model.get("size") if kind != "directory" else None,
            created=epoch_seconds(model.get("created")) or None,
            modified=epoch_seconds(model.get("last_modified")) or None,
            writable=bool(model.get("writable", True)),
            mimetype=mime,
        )

    async def list_documents(self, folder: str, caller: Caller) -> builtins.list[Document]:
        await self._asked(caller, "read")
        model = await self.api.get_contents(self.paths.folder_of(folder), type="directory")
        items = [m for m in model.get("content") or [] if isinstance(m, dict)]
        found = [self._document(m) for m in items if not str(m.get("name", ".")).startswith(".")]
        return sorted(found, key=lambda d: d.name)

    async def stat_document(self, path: str, caller: Caller) -> Document:
        await self._asked(caller, "read")
        _, server = self._server(path)
        return self._document(await self.api.get_contents(server, content=False))

    async def read_document(
        self, path: str, caller: Caller, *, limit: int | None = None
    ) -> tuple[bytes, int]:
        rel, server = self._server(path)
        if (await self.stat_document(rel, caller)).type == "directory":
            raise InvalidArgument(f"{rel!r} is a folder, not a file.")
        notebook = rel.endswith(".ipynb")
        model = await self.api.get_contents(server, type="notebook" if notebook else "file")
        content = model.get("content")
        if notebook:
            data = json.dumps(content, ensure_ascii=False, indent=1).encode("utf-8")
        elif model.get("format") == "base64":
            data = base64.b64decode(str(content or ""))
        else:
            data = str(content or "").encode("utf-8")
        return (data if limit is None else data[:limit]), len(data)

    async def write_document(
        self, path: str, caller: Caller, data: bytes, *, overwrite: bool
    ) -> Document:
        await self._asked(caller, "write")
        rel, server = self._server(path)
        if not overwrite and await self.api.exists(server):
            raise NotebookExists(
                f"{rel!r} already exists.", hint="Pick another path; nothing was changed."
            )
        folder = posixpath.dirname(server)
        if folder:
            await self.api.make_folders(folder)
        try:
            model = {"type": "file", "format": "text", "content": data.decode("utf-8")}
        except UnicodeDecodeError:
            encoded = base64.b64encode(data).decode("ascii")
            model = {"type": "file", "format": "base64", "content": encoded}
        await self.api.save_contents(server, model)
        return await self.stat_document(rel, caller)

    async def remove_document(self, path: str, caller: Caller) -> None:
        await self._asked(caller, "write")
        rel, server = self._server(path)
        doc = await self.stat_document(rel, caller)
        if doc.type == "directory" and await self.list_documents(rel, caller):
            raise InvalidArgument(
                f"folder {rel!r} is not empty.",
                hint="Delete the files in it first; only empty folders are deleted.",
            )
        await self.api.delete_contents(server)

    async def move_document(
        self, src: str, dst: str, caller: Caller, *, keep_source: bool
    ) -> Document:
        await self._asked(caller, "write")
        src_rel, src_server = self._server(src)
        dst_rel, dst_server = self._server(dst)
        if keep_source:
            data, _ = await self.read_document(src_rel, caller)
            return await self.write_document(dst_rel, caller, data, overwrite=False)
        if await self.api.exists(dst_server):
            raise NotebookExists(
                f"{dst_rel!r} already exists.", hint="Pick another path; nothing was changed."
            )
        folder = posixpath.dirname(dst_server)
        if folder:
            await self.api.make_folders(folder)
        await self.api.rename_contents(src_server, dst_server)
        return await self.stat_document(dst_rel, caller)
