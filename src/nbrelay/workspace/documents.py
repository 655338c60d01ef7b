"""Documents: any file or folder under the root, as the document tools of the compatibility
profiles see them. A ``.ipynb`` path is a notebook: created, imported, moved and deleted through
the notebook store, with its kernel and session stopped first.
"""

from __future__ import annotations

from nbrelay.caller import Caller
from nbrelay.errors import (
    InvalidArgument,
    NbrelayError,
    NotebookExists,
    NotebookNotFound,
    Unsupported,
)
from nbrelay.notebook.model import parse
from nbrelay.stores.base import Document, DocumentStore, Snapshot
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.sessions import Sessions
from nbrelay.workspace.transfer import Transfer


class Documents:
    """Files and folders of the store's root (``DocumentStore``), notebooks among them."""

    def __init__(self, notebooks: Notebooks, transfer: Transfer, sessions: Sessions) -> None:
        self._notebooks = notebooks
        self._transfer = transfer
        self._sessions = sessions

    def _documents(self) -> DocumentStore:
        if self._notebooks.capabilities.documents is not None:
            return self._notebooks.capabilities.documents
        from nbrelay.stores import live_extras

        found = live_extras.for_store(self._notebooks.store)
        if found is not None:
            return found
        raise Unsupported(
            f"this store ({self._notebooks.store.mode}) does not serve files other than notebooks.",
            hint="Use the notebook tools, or serve the folder in file mode (--root).",
        )

    async def list_documents(self, folder: str, caller: Caller) -> list[Document]:
        return await self._documents().list_documents(folder, caller)

    async def document(self, path: str, caller: Caller) -> Document:
        return await self._documents().stat_document(path, caller)

    async def last_modified(self, snap: Snapshot, caller: Caller) -> float | None:
        """When a notebook's file last changed (live snapshots do not carry it); None if the
        store cannot tell."""
        if snap.modified is not None:
            return snap.modified
        try:
            return (await self.document(snap.path, caller)).modified
        except NbrelayError:
            return None

    async def document_exists(self, path: str, caller: Caller) -> bool:
        try:
            await self.document(path, caller)
        except NotebookNotFound:
            return False
        return True

    async def read_document(
        self, path: str, caller: Caller, *, limit: int | None = None
    ) -> tuple[bytes, int]:
        """The first ``limit`` bytes of a file (all if None) and its full size."""
        return await self._documents().read_document(path, caller, limit=limit)

    async def create_document(
        self, path: str, caller: Caller, content: str | None = None
    ) -> Document:
        """Create a file, never over an existing one. A ``.ipynb`` path becomes a notebook: empty,
        or imported from ``content`` (notebook JSON, Markdown or a script)."""
        if path.endswith(".ipynb"):
            if content and content.strip():
                await self._transfer.import_notebook(path, caller, content=content)
            else:
                await self._notebooks.create_notebook(path, caller)
            return await self.document(path, caller)
        try:
            data = (content or "").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                "the content is not valid Unicode (it holds an unpaired surrogate); nothing was "
                "written.",
                hint="Remove unpaired surrogate characters (U+D800-U+DFFF) from the content.",
            ) from exc
        return await self._documents().write_document(path, caller, data, overwrite=False)

    async def delete_document(self, path: str, caller: Caller) -> Document:
        """Delete a file or an empty folder for ``caller``; a notebook's kernel is shut down
        first."""
        doc = await self.document(path, caller)
        if doc.type == "notebook":
            await self._sessions.forget(doc.path, caller)
            await self._notebooks.store.remove(doc.path, caller)
        else:
            await self._documents().remove_document(doc.path, caller)
        return doc

    async def move_document(
        self, src: str, dst: str, caller: Caller, *, keep_source: bool = False
    ) -> Document:
        """Rename (or copy) a file, never over an existing one. A notebook that is moved loses
        its kernel; a file moved to a ``.ipynb`` path must be a valid notebook."""
        doc = await self.document(src, caller)
        if doc.type == "directory":
            raise Unsupported(
                f"{doc.path!r} is a folder; only files can be renamed or copied.",
                hint="Create the new folder and move the files into it one by one.",
            )
        documents = self._documents()
        if await self.document_exists(dst, caller):
            raise NotebookExists(
                f"{dst!r} already exists.", hint="Pick another path; nothing was changed."
            )
        if not keep_source and doc.type == "notebook":
            await self._sessions.forget(doc.path, caller)
        if dst.endswith(".ipynb") and doc.type == "notebook":
            await self._notebooks.store.rename(
                doc.path, dst, caller, overwrite=False, keep_source=keep_source
            )
        elif dst.endswith(".ipynb"):
            raw, _ = await documents.read_document(doc.path, caller)
            nb = parse(raw, name=doc.path)
            await self._notebooks.store.create(dst, caller, nb, overwrite=False)
            if not keep_source:
                await documents.remove_document(doc.path, caller)
        else:
            await documents.move_document(doc.path, dst, caller, keep_source=keep_source)
        return await self.document(dst, caller)
