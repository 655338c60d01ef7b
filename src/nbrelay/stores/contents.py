"""Notebooks on a Jupyter Server through its REST contents API: the live-mode fallback.

Used when the server has no jupyter-collaboration (the live store probes for it). Each edit reads
the notebook and its hash, plans against it, checks the hash again just before writing, then
writes the whole notebook back. Jupyter Server has no conditional write, so a change saved in the
moment between that check and the write can still be overwritten. A browser tab that has the
notebook open does not see the change until it reloads, and saving from that tab would overwrite
it: every edit result says so.

Versions are the first 16 hex digits of the server's sha256 of the file (file mode hashes a
file's cells apart, so that an edit hashes only the cells it wrote: its versions differ).
"""

from __future__ import annotations

import builtins
import json
from typing import Any

from nbrelay.caller import Caller
from nbrelay.errors import (
    ConflictError,
    NotebookExists,
    NotebookInvalid,
    NotebookNotFound,
    PathError,
    RemoteError,
    act,
)
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.notebook import validate
from nbrelay.notebook.model import Notebook, from_dict, serialize, version_of
from nbrelay.stores import paths
from nbrelay.stores.base import Capabilities, EditOutcome, Entry, NotebookStore, Planner, Snapshot
from nbrelay.stores.editing import LockedEdits, Readers
from nbrelay.stores.paths import Glob
from nbrelay.timestamps import epoch_seconds

NOT_LIVE_NOTE = (
    "This Jupyter Server has no jupyter-collaboration, so the change was saved to the file, not "
    "shown live: a browser tab with the notebook open shows it only after a reload, and saving "
    "from such a tab would overwrite it."
)

_MAX_LISTED_FOLDERS = 2000


def normalize(path: str, *, suffix: str = ".ipynb") -> str:
    """Check a notebook path given by an agent; return it relative, with ``/`` separators.

    The same rules as file mode: no ``..``, no hidden part, no backslash, NUL or URL, and the
    right suffix. The server enforces its own root on top.
    """
    paths.check_text(path)
    if path.startswith("/") or path.startswith("~"):
        raise PathError(
            f"the path {path!r} is absolute.",
            hint="In live mode paths are relative to the Jupyter Server's root folder.",
        )
    return paths.relative(path, path.split("/"), suffix)


def plain_notebook(nb: Notebook) -> dict[str, Any]:
    """The notebook as the JSON the server should store: nbformat's shape, without ``trusted``.

    Dropping ``trusted`` keeps the server from signing a notebook whose outputs nbrelay wrote.
    """
    data: dict[str, Any] = json.loads(serialize(nb))
    return data


class Paths:
    """Agent paths ↔ server paths, below an optional folder of the server's root."""

    def __init__(self, folder: str = "") -> None:
        self.folder = normalize(folder, suffix="") if folder.strip("/") else ""

    def relative(self, path: str) -> str:
        return normalize(path)

    def server(self, rel: str) -> str:
        return f"{self.folder}/{rel}" if self.folder else rel

    def folder_of(self, folder: str) -> str:
        if folder in ("", ".", "/"):
            return self.folder
        return self.server(normalize(folder, suffix=""))

    def back(self, server_path: str) -> str:
        if self.folder:
            return server_path[len(self.folder) + 1 :]
        return server_path


class ContentsStore(LockedEdits, NotebookStore):
    """Notebooks of a Jupyter Server through REST (see the module docstring)."""

    mode = "contents"

    def __init__(self, api: JupyterAPI, *, folder: str = "") -> None:
        self.api = api
        self.paths = Paths(folder)
        self._seen = Readers(notebooks_kept=False)  # per MCP session (reader)

    @property
    def capabilities(self) -> Capabilities:
        """Notebooks only (other files go through ``live_extras``), no live sessions."""
        return Capabilities()

    def relative(self, path: str) -> str:
        return self.paths.relative(path)

    # -- listing -------------------------------------------------------------------------

    async def list(self, folder: str, caller: Caller, *, recursive: bool) -> builtins.list[Entry]:
        return await self.find(folder, caller, recursive=recursive)

    async def find(
        self,
        folder: str,
        caller: Caller,
        *,
        recursive: bool = True,
        glob: Glob | None = None,
        limit: int | None = None,
    ) -> builtins.list[Entry]:
        """Walk the server's folders depth first (each folder's notebooks by name, then its
        subfolders), one contents request per folder, entering only folders the glob can match
        in and stopping at ``limit`` notebooks."""
        top = self.paths.folder_of(folder)
        found: builtins.list[Entry] = []
        pending = [top]
        seen = 0
        while pending:
            current = pending.pop()
            seen += 1
            if seen > _MAX_LISTED_FOLDERS:
                break
            try:
                model = await self.api.get_contents(current, content=True)
            except NotebookNotFound as exc:
                if current == top:
                    raise NotebookNotFound(
                        f"folder {folder!r} does not exist.",
                        hint=act("list_all"),
                    ) from exc
                continue
            if model.get("type") != "directory":
                raise PathError(f"{folder!r} is not a folder.")
            children = model.get("content") or []
            subfolders: builtins.list[str] = []
            for child in sorted(children, key=lambda c: str(c.get("name", ""))):
                name = str(child.get("name", ""))
                if name.startswith("."):
                    continue
                kind = child.get("type")
                rel = self.paths.back(str(child.get("path", "")))
                if kind == "directory":
                    if recursive and (glob is None or glob.enter(rel)):
                        subfolders.append(str(child.get("path", "")))
                elif kind == "notebook" or (kind == "file" and name.endswith(".ipynb")):
                    if glob is not None and not glob.match(rel):
                        continue
                    size = child.get("size")
                    found.append(
                        Entry(
                            rel,
                            int(size) if isinstance(size, int) else 0,
                            epoch_seconds(child.get("last_modified")),
                        )
                    )
                    if limit is not None and len(found) >= limit:
                        return found
            pending += reversed(subfolders)  # the first subfolder is walked next
        return found

    # -- reading -------------------------------------------------------------------------

    async def _fetch(self, rel: str) -> Snapshot:
        full = self.paths.server(rel)
        try:
            model = await self.api.get_contents(full, content=True, hash=True, type="notebook")
        except NotebookNotFound as exc:
            raise paths.missing(rel) from exc
        except RemoteError as exc:
            if "400" in exc.message:
                raise NotebookInvalid(
                    f"the Jupyter Server cannot read {rel!r} as a notebook: {exc.message}",
                    hint="Open it in JupyterLab to see the problem, or restore it.",
                ) from exc
            raise
        content = model.get("content")
        nb = from_dict(content, name=rel)
        digest = model.get("hash")
        version = (
            str(digest)[:16] if isinstance(digest, str) and digest else version_of(serialize(nb))
        )
        size = model.get("size")
        return Snapshot(
            path=rel,
            notebook=nb,
            version=version,
            size=int(size) if isinstance(size, int) else None,
            modified=epoch_seconds(model.get("last_modified")),
            problems=tuple(validate.problems(nb)),
            notes=tuple(nb.problems),
        )

    async def _hash(self, rel: str) -> str | None:
        model = await self.api.get_contents(self.paths.server(rel), content=False, hash=True)
        digest = model.get("hash")
        return str(digest)[:16] if isinstance(digest, str) and digest else None

    async def load(self, path: str, caller: Caller) -> Snapshot:
        rel = self.relative(path)
        return await self._seen.observe(rel, caller, await self._fetch(rel))

    async def peek(self, path: str, caller: Caller) -> Snapshot:
        return await self._fetch(self.relative(path))

    # -- writing -------------------------------------------------------------------------

    async def _write(self, rel: str, nb: Notebook) -> Snapshot:
        full = self.paths.server(rel)
        folder = full.rsplit("/", 1)[0] if "/" in full else ""
        if folder:
            await self.api.make_folders(folder)
        await self.api.save_contents(
            full, {"type": "notebook", "format": "json", "content": plain_notebook(nb)}
        )
        return await self._fetch(rel)

    async def create(
        self, path: str, caller: Caller, notebook: Notebook, *, overwrite: bool
    ) -> Snapshot:
        rel = self.relative(path)
        validate.check_notebook(notebook)
        async with self.lock(rel):
            if not overwrite and await self.api.exists(self.paths.server(rel)):
                raise NotebookExists(
                    f"{rel!r} already exists.",
                    hint=act("exists"),
                )
            snap = await self._write(rel, notebook)
        await self._seen.remember(rel, caller, snap)
        return snap

    async def _edit_locked(
        self,
        rel: str,
        key: str,
        caller: Caller,
        planner: Planner,
        expected: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        before = await self._fetch(rel)
        fix = "Fix it in JupyterLab, then retry."
        plan, after_nb, outside = self._seen.plan(
            rel, caller, before, planner, expected, guard_positions, fix
        )
        if after_nb is None:
            return EditOutcome(before, before, plan, changed_outside=outside)
        current = await self._hash(rel)
        if current is not None and current != before.version:
            raise ConflictError(
                f"{rel!r} was changed by someone else while nbrelay was editing it; your "
                "change was not applied.",
                current=current,
                hint="Read the notebook again and retry.",
            )
        after = await self._write(rel, after_nb)
        await self._seen.remember(rel, caller, after)
        return EditOutcome(before, after, plan, changed_outside=outside, notes=(NOT_LIVE_NOTE,))

    async def remove(self, path: str, caller: Caller) -> None:
        rel = self.relative(path)
        async with self.lock(rel):
            await self._fetch(rel)
            await self.api.delete_contents(self.paths.server(rel))
            await self._seen.forget(rel)

    async def rename(
        self, src: str, dst: str, caller: Caller, *, overwrite: bool, keep_source: bool
    ) -> Snapshot:
        src_rel, dst_rel = self.relative(src), self.relative(dst)
        if src_rel == dst_rel:
            raise PathError(f"{src!r} and {dst!r} are the same file.")
        snap = await self._fetch(src_rel)
        if keep_source:
            return await self.create(dst_rel, caller, snap.notebook, overwrite=overwrite)
        if await self.api.exists(self.paths.server(dst_rel)):
            if not overwrite:
                raise NotebookExists(
                    f"{dst_rel!r} already exists.",
                    hint=act("exists"),
                )
            await self.api.delete_contents(self.paths.server(dst_rel))
        full = self.paths.server(dst_rel)
        if "/" in full:
            await self.api.make_folders(full.rsplit("/", 1)[0])
        await self.api.rename_contents(self.paths.server(src_rel), full)
        await self._seen.forget(src_rel)
        return await self.load(dst_rel, caller)

    async def aclose(self) -> None:
        await self.api.aclose()
