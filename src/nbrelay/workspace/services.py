"""The workspace as tools see it: notebook services on top of editing and running — export and
import, what the agent has viewed, sessions held open, and documents of any kind.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import time
from collections.abc import Callable

import anyio
import anyio.to_thread

from nbrelay import formats
from nbrelay.errors import (
    ConflictError,
    InvalidArgument,
    NbrelayError,
    NotebookExists,
    NotebookInvalid,
    NotebookNotFound,
    Unsupported,
)
from nbrelay.notebook.model import Notebook, parse
from nbrelay.stores.base import (
    Document,
    DocumentStore,
    LocalFiles,
    Snapshot,
)
from nbrelay.workspace.core import ExportOutcome, NotebookSession, file_id
from nbrelay.workspace.inspecting import InspectingWorkspace

logger = logging.getLogger("nbrelay")


class Workspace(InspectingWorkspace):
    """The one service API every tool of every profile calls."""

    # -- export and import ----------------------------------------------------------------

    def _files(self, what: str) -> LocalFiles:
        files = self.capabilities.files
        if files is None:
            raise Unsupported(
                f"{what} needs file mode (--root).",
                hint="Export without save, or import from content, and handle the file yourself.",
            )
        return files

    async def export_notebook(
        self,
        path: str,
        fmt: str = "ipynb",
        *,
        outputs: bool = True,
        save: bool = False,
        to: str | None = None,
        overwrite: bool = False,
        image_link: formats.ImageLink | None = None,
        max_chars: int | None = None,
    ) -> ExportOutcome:
        """Convert a notebook; with ``save`` or ``to`` write it (default: next to the notebook,
        same name, the format's extension) instead of returning it inline, where a text export
        surely longer than ``max_chars`` is refused before any conversion."""
        formats.export_info(fmt)
        if to is not None:
            self._files("saving an export").file_path(to)
        snap = await self.store.load(path)
        target = to
        if target is None and save:
            self._files("saving an export")
        stem = posixpath.splitext(posixpath.basename(target or snap.path))[0]
        exported = await formats.export(
            snap.notebook,
            fmt,
            outputs=outputs,
            stem=stem,
            image_link=None if (save or to) else image_link,
            browser=self.settings.browser,
            time_limit=self.settings.export_timeout,
            max_chars=None if (save or to) else max_chars,
        )
        if not (save or to):
            return ExportOutcome(snap, exported)
        target = target or posixpath.splitext(snap.path)[0] + exported.extension
        if not target.endswith(exported.extension):
            raise InvalidArgument(
                f"{target!r} does not end in {exported.extension}, the {fmt} file extension.",
                hint=f'Give a path like "{posixpath.splitext(target)[0]}{exported.extension}".',
            )
        if target.endswith(".ipynb"):
            await self.create_from(target, parse(exported.data, name=target), overwrite=overwrite)
            return ExportOutcome(snap, exported, (self.store.relative(target),))
        store = self._files("saving an export")
        folder = posixpath.dirname(target)
        files = {target: exported.data}
        files.update({posixpath.join(folder, n): b for n, b in exported.files.items()})
        await store.write_files(files, overwrite=overwrite)
        return ExportOutcome(snap, exported, tuple(store.file_path(p) for p in files))

    async def import_notebook(
        self,
        path: str,
        *,
        content: str | None = None,
        source: str | None = None,
        fmt: str = "auto",
        overwrite: bool = False,
        prepare: Callable[[Notebook], None] | None = None,
    ) -> Snapshot:
        """Create notebook ``path`` from text (``content``) or a file under the root
        (``source``) in an import format; nothing is written if the input is bad. ``prepare``
        may adjust the parsed notebook (its metadata, say) before it is written."""
        if (content is None) == (source is None):
            raise InvalidArgument(
                "give either content (the text to import) or source (a file under the root).",
            )
        self.store.relative(path)
        filename = None
        if source is not None:
            filename, raw = await self._files("importing a file").read_file(source)
            try:
                content = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise NotebookInvalid(
                    f"{filename!r} is not UTF-8 text (byte {exc.start} is invalid).",
                    hint="Import text files: ipynb, Markdown, MyST or a script.",
                ) from exc
        text = content or ""
        nb = await anyio.to_thread.run_sync(
            lambda: formats.import_notebook(text, fmt, filename=filename)
        )
        if prepare is not None:
            prepare(nb)
        return await self.create_from(path, nb, overwrite=overwrite)

    # -- what the agent has seen ----------------------------------------------------------

    async def view(self, path: str) -> Snapshot:
        """Read a notebook and remember its version as the one the agent has now seen."""
        snap = await self.store.load(path)
        self._viewed[snap.path] = snap.version
        return snap

    async def unchanged_since_viewed(
        self, path: str, *, hint: str = "Read the notebook again, then retry."
    ) -> Snapshot:
        """The current notebook, if it is the version the agent last viewed (nbrelay's own edits
        and saved outputs keep a view current); otherwise ``ConflictError``, nothing done."""
        snap = await self.store.load(path)
        seen = self._viewed.get(snap.path)
        if seen is None:
            raise ConflictError(
                f"you have not viewed {snap.path!r} yet, so nbrelay cannot tell whether your "
                "idea of its cells is current. Nothing was changed.",
                current=snap.version,
                hint=hint,
            )
        if seen != snap.version:
            raise ConflictError(
                f"{snap.path!r} has changed since you last viewed it (someone edited or ran "
                "it). Nothing was changed.",
                current=snap.version,
                hint=hint,
            )
        return snap

    # -- sessions: notebooks held open with their kernel ----------------------------------

    async def begin_session(self, path: str) -> NotebookSession:
        """Open a notebook for work: start (or reuse) its kernel and, in live mode, join and keep
        its collaboration room. Beginning an open session again returns it."""
        snap = await self.store.load(path)
        now = time.time()
        found = self._sessions.get(snap.path)
        if found is not None and found.active:
            found.last_activity = now
            await self._runner(snap)
            return found
        runner = await self._runner(snap)
        session_id, fid, live = runner.session.info.kernel_id, file_id(snap.path), False
        live_sessions = self.capabilities.sessions
        if live_sessions is not None:
            with contextlib.suppress(Unsupported):  # a server without collaboration
                session_id, fid = await live_sessions.open_session(snap.path)
                live = True
        session = NotebookSession(snap.path, session_id, fid, live, now, now)
        self._sessions[snap.path] = session
        return session

    async def end_session(self, path: str) -> NotebookSession | None:
        """Close a session: leave the live room (live mode) or shut down the notebook's kernel
        (file mode). None if the notebook had no open session."""
        rel = self.store.relative(path)
        session = self._sessions.get(rel)
        if session is None or not session.active:
            return None
        if not session.live:
            await self.shutdown_kernel(rel)
        elif (live_sessions := self.capabilities.sessions) is not None:
            await live_sessions.close_session(rel)
        session.active = False
        session.last_activity = time.time()
        return session

    def sessions(self, folder: str = "") -> list[NotebookSession]:
        """Sessions of notebooks under ``folder``: those begun (open or ended) and, as open
        sessions, notebooks whose kernel runs without one."""
        found = dict(self._sessions)
        kernels = self._kernels.running() if self._kernels is not None else []
        for info in kernels:
            if info.key not in found:  # a session ended stays ended; its kernel may run on
                found[info.key] = NotebookSession(
                    info.key, info.kernel_id, file_id(info.key), False, info.started, 0.0
                )
        for info in kernels:
            session = found[info.key]
            session.last_activity = max(session.last_activity, info.last_activity)
        prefix = folder.strip("/")
        return [
            s
            for key, s in sorted(found.items())
            if not prefix or key == prefix or key.startswith(prefix + "/")
        ]

    async def _forget(self, rel: str) -> None:
        """A notebook is going away (deleted or moved): stop its kernel, drop its state."""
        session = self._sessions.pop(rel, None)
        live = session is not None and session.active and session.live
        live_sessions = self.capabilities.sessions
        if live and live_sessions is not None:
            await live_sessions.close_session(rel)
        await self.shutdown_kernel(rel)
        self._history.pop(rel, None)
        self._viewed.pop(rel, None)

    # -- documents: any file or folder under the root -------------------------------------

    def _documents(self) -> DocumentStore:
        if self.capabilities.documents is not None:
            return self.capabilities.documents
        from nbrelay.stores import live_extras

        found = live_extras.for_store(self.store)
        if found is not None:
            return found
        raise Unsupported(
            f"this store ({self.store.mode}) does not serve files other than notebooks.",
            hint="Use the notebook tools, or serve the folder in file mode (--root).",
        )

    async def list_documents(self, folder: str = "") -> list[Document]:
        return await self._documents().list_documents(folder)

    async def document(self, path: str) -> Document:
        return await self._documents().stat_document(path)

    async def last_modified(self, snap: Snapshot) -> float | None:
        """When a notebook's file last changed (live snapshots do not carry it); None if the
        store cannot tell."""
        if snap.modified is not None:
            return snap.modified
        try:
            return (await self.document(snap.path)).modified
        except NbrelayError:
            return None

    async def document_exists(self, path: str) -> bool:
        try:
            await self.document(path)
        except NotebookNotFound:
            return False
        return True

    async def read_document(self, path: str, *, limit: int | None = None) -> tuple[bytes, int]:
        """The first ``limit`` bytes of a file (all if None) and its full size."""
        return await self._documents().read_document(path, limit=limit)

    async def create_document(self, path: str, content: str | None = None) -> Document:
        """Create a file, never over an existing one. A ``.ipynb`` path becomes a notebook: empty,
        or imported from ``content`` (notebook JSON, Markdown or a script)."""
        if path.endswith(".ipynb"):
            if content and content.strip():
                await self.import_notebook(path, content=content)
            else:
                await self.create_notebook(path)
            return await self.document(path)
        try:
            data = (content or "").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                "the content is not valid Unicode (it holds an unpaired surrogate); nothing was "
                "written.",
                hint="Remove unpaired surrogate characters (U+D800-U+DFFF) from the content.",
            ) from exc
        return await self._documents().write_document(path, data, overwrite=False)

    async def delete_document(self, path: str) -> Document:
        """Delete a file or an empty folder; a notebook's kernel is shut down first."""
        doc = await self.document(path)
        if doc.type == "notebook":
            await self._forget(doc.path)
            await self.store.remove(doc.path)
        else:
            await self._documents().remove_document(doc.path)
        return doc

    async def move_document(self, src: str, dst: str, *, keep_source: bool = False) -> Document:
        """Rename (or copy) a file, never over an existing one. A notebook that is moved loses
        its kernel; a file moved to a ``.ipynb`` path must be a valid notebook."""
        doc = await self.document(src)
        if doc.type == "directory":
            raise Unsupported(
                f"{doc.path!r} is a folder; only files can be renamed or copied.",
                hint="Create the new folder and move the files into it one by one.",
            )
        documents = self._documents()
        if await self.document_exists(dst):
            raise NotebookExists(
                f"{dst!r} already exists.", hint="Pick another path; nothing was changed."
            )
        if not keep_source and doc.type == "notebook":
            await self._forget(doc.path)
        if dst.endswith(".ipynb") and doc.type == "notebook":
            await self.store.rename(doc.path, dst, overwrite=False, keep_source=keep_source)
        elif dst.endswith(".ipynb"):
            raw, _ = await documents.read_document(doc.path)
            await self.store.create(dst, parse(raw, name=doc.path), overwrite=False)
            if not keep_source:
                await documents.remove_document(doc.path)
        else:
            await documents.move_document(doc.path, dst, keep_source=keep_source)
        return await self.document(dst)
