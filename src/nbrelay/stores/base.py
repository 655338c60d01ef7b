"""The store interface: where a notebook lives (files on disk, a Jupyter Server, a live room).

The workspace is the only caller. A store hands out immutable snapshots and applies edits under
its own concurrency control: ``edit`` calls the planner against the freshest content while it
holds the notebook's lock, so a plan can never be made against one version and applied to
another.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar, runtime_checkable

from nbrelay.caller import Caller
from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import Notebook
from nbrelay.stores.paths import Glob

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

Planner = Callable[[Notebook], Plan]

V = TypeVar("V")
_MAX_READER_ENTRIES = 50_000


class LastSeen(Generic[V]):
    """What each reader (``nbrelay.caller``: the MCP client a store call is made for) last saw
    of each notebook (a version, a cell order), by path: what "since you last read it" means
    when several clients share one server.

    Keyed by path and caller. A reader that has not seen a path yet gets what anyone in this
    process saw last, so a caller nbrelay cannot tell apart keeps the process-wide guard.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], V] = {}

    def get(self, path: str, caller: Caller) -> V | None:
        """What ``caller`` last saw of ``path`` (else what anyone in this process saw last)."""
        reader = caller.key
        if reader and (reader, path) in self._seen:
            return self._seen[reader, path]
        return self._seen.get(("", path))

    def set(self, path: str, caller: Caller, value: V) -> None:
        """``caller`` has just seen ``value`` of ``path``."""
        self._seen["", path] = value
        reader = caller.key
        if reader:
            self._seen.pop((reader, path), None)
            self._seen[reader, path] = value
            if len(self._seen) > _MAX_READER_ENTRIES:  # forget the longest-unused readers
                for key in [k for k in self._seen if k[0]][: _MAX_READER_ENTRIES // 10]:
                    del self._seen[key]

    def shrink(self, path: str, smaller: Callable[[V], V]) -> None:
        """Keep what every reader saw of ``path`` as ``smaller`` makes it (safe to call from a
        worker thread while the event loop reads and sets)."""
        made: dict[int, V] = {}  # one smaller value per value: entries often share one
        for key, value in list(self._seen.items()):
            if key[1] == path:
                less = made.get(id(value))  # the values stay alive in the list: ids hold
                if less is None:
                    less = made[id(value)] = smaller(value)
                if less is not value and self._seen.get(key) is value:
                    self._seen[key] = less

    def forget(self, path: str) -> None:
        """Drop what every reader saw of ``path``."""
        for key in [k for k in list(self._seen) if k[1] == path]:
            self._seen.pop(key, None)


@dataclass(frozen=True)
class Snapshot:
    """One version of a notebook. Never mutate ``notebook``: snapshots are shared."""

    path: str
    notebook: Notebook
    version: str
    size: int | None = None
    modified: float | None = None
    problems: tuple[str, ...] = ()
    changed_outside: bool = False
    # Things the agent should be told about this read (live mode: a reload, a reconnect).
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EditOutcome:
    """The result of one ``edit``: the snapshots either side and the plan that was applied."""

    before: Snapshot
    after: Snapshot
    plan: Plan
    changed_outside: bool = False
    # Things the agent should be told about this edit (live mode: no live view, a reload).
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    """A notebook found by ``list``: its path relative to the root, size and mtime."""

    path: str
    size: int
    modified: float
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Document:
    """Any file or folder under the root, as the document tools show it (times: epoch seconds)."""

    path: str
    name: str
    type: Literal["notebook", "file", "directory"]
    size: int | None
    created: float | None
    modified: float | None
    writable: bool
    mimetype: str | None = None


class NotebookStore(Protocol):
    """Where notebooks live. Paths are relative to the store's root, with ``/`` separators."""

    mode: str

    async def list(self, folder: str, caller: Caller, *, recursive: bool) -> list[Entry]:
        """List the notebooks under ``folder`` for ``caller``, in walk order: each folder's
        notebooks by name, then its subfolders. Called by the profiles' listings."""
        ...

    async def find(
        self,
        folder: str,
        caller: Caller,
        *,
        recursive: bool = True,
        glob: Glob | None = None,
        limit: int | None = None,
    ) -> builtins.list[Entry]:
        """The first ``limit`` notebooks under ``folder`` (all if None) that ``glob`` matches,
        in ``list``'s order. A store that can walks only the folders the glob can match in and
        stops at ``limit``; this default filters ``list``. Called by ``Notebooks.list_notebooks``
        and the search over many notebooks."""
        found = [
            e
            for e in await self.list(folder, caller, recursive=recursive)
            if glob is None or glob.match(e.path)
        ]
        return found if limit is None else found[:limit]

    async def scan(self, path: str, caller: Caller) -> Snapshot:
        """The current snapshot for a pass over many notebooks (a search): like ``peek``, but a
        store that caches notebooks does not keep this one unless it had it already."""
        return await self.peek(path, caller)

    async def load(self, path: str, caller: Caller) -> Snapshot:
        """Return the current snapshot, read by ``caller`` (what it last read of the notebook
        is now this version). Called by every read; must be cheap when unchanged."""
        ...

    async def peek(self, path: str, caller: Caller) -> Snapshot:
        """The current snapshot for ``caller``, without counting as its read (the guard on edits by
        position is left as it was). Called by the change feed, which watches notebooks that
        clients listen to."""
        ...

    async def create(
        self, path: str, caller: Caller, notebook: Notebook, *, overwrite: bool
    ) -> Snapshot:
        """Create (or, if asked, replace) a notebook for ``caller``. Called by create and import
        tools."""
        ...

    async def edit(
        self,
        path: str,
        caller: Caller,
        planner: Planner,
        *,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        """Plan against the freshest content and apply it atomically.

        Refuses with ``ConflictError`` when ``expected_version`` is given and differs, or when
        ``guard_positions`` is set (the plan addresses cells by position) and the notebook was
        changed by someone else since ``caller`` last read it. Called by ``Notebooks.edit``.
        """
        ...

    async def remove(self, path: str, caller: Caller) -> None:
        """Delete a notebook for ``caller``. Called by the document tools of compatibility profiles."""
        ...

    async def rename(
        self, src: str, dst: str, caller: Caller, *, overwrite: bool, keep_source: bool
    ) -> Snapshot:
        """Move (or copy, with ``keep_source``) a notebook to a new path, for ``caller``."""
        ...

    def relative(self, path: str) -> str:
        """Validate a notebook path and return its normal relative form (raises PathError)."""
        ...

    async def aclose(self) -> None:
        """Release connections and locks. Called once when the server stops."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What this store can do beyond this interface (the workspace asks this, never the
        store's type or attributes)."""
        ...


@runtime_checkable
class DocumentStore(Protocol):
    """Files and folders of any kind under the root, with the notebook path rules (no suffix
    rule), each operation for the caller it is given. Called by the workspace's document
    methods; notebooks themselves are still created, removed and renamed through
    ``NotebookStore``."""

    async def list_documents(self, folder: str, caller: Caller) -> list[Document]:
        """The files and folders directly inside ``folder`` (hidden ones left out)."""
        ...

    async def stat_document(self, path: str, caller: Caller) -> Document:
        """One file or folder; raises ``NotebookNotFound`` if there is none."""
        ...

    async def read_document(
        self, path: str, caller: Caller, *, limit: int | None = None
    ) -> tuple[bytes, int]:
        """The first ``limit`` bytes of a file (all if None) and its full size."""
        ...

    async def write_document(
        self, path: str, caller: Caller, data: bytes, *, overwrite: bool
    ) -> Document:
        """Write a file atomically (making its folders); refuses to replace one unless asked."""
        ...

    async def remove_document(self, path: str, caller: Caller) -> None:
        """Delete a file, or a folder that is empty."""
        ...

    async def move_document(
        self, src: str, dst: str, caller: Caller, *, keep_source: bool
    ) -> Document:
        """Move (or copy, with ``keep_source``) a file; never over an existing one."""
        ...


@runtime_checkable
class LiveSessions(Protocol):
    """A store whose notebooks can be held open as live collaboration sessions (live mode)."""

    async def open_session(self, path: str, caller: Caller) -> tuple[str, str]:
        """Join (and keep) the notebook's room for ``caller``; return its (session id, file id)."""
        ...

    async def close_session(self, path: str) -> bool:
        """Leave the notebook's room; False if it was not open."""
        ...


@runtime_checkable
class Flushing(Protocol):
    """A store that writes notebook files after an edit returns (live mode saves in the
    background, coalesced, as JupyterLab does for a person's typing)."""

    async def flush(self, path: str, caller: Caller) -> str | None:
        """Wait, for ``caller``, until the file holds every change made so far; None when it
        does, else why not."""
        ...


@runtime_checkable
class RunState(Protocol):
    """A store that shows people which cells are running, as JupyterLab does (``[*]`` in the
    prompt): the rooms of live and extension mode, where the run state lives in the shared
    document only (it is not a notebook field, and never reaches a file)."""

    async def show_running(
        self, path: str, caller: Caller, running: Collection[str], idle: Collection[str]
    ) -> None:
        """Show, for ``caller`` (who started the run), the code cells ``running`` (ids) as running and ``idle`` as not; cells that
        already show so, and ids the notebook does not have, are left alone. It is a display,
        not the notebook: a room that ended is left as it is."""
        ...


class LocalFiles(Protocol):
    """A store whose notebooks are files on this machine (file mode): kernels run in their
    folders, exports are saved and imports read next to them, kernel state files are kept in a
    hidden folder beside each notebook."""

    root: Path

    def open_kernel_folder(self, cwd: str) -> int:
        """A descriptor of a kernel's folder under the root (what a sandbox binds)."""
        ...

    def state_file(self, path: str, name: str) -> str:
        """The real path of the kernel state file ``name`` of notebook ``path``."""
        ...

    async def state_exists(self, real: str) -> bool:
        """Whether a state file given by :meth:`state_file` exists."""
        ...

    async def remove_state(self, real: str) -> None:
        """Delete a state file given by :meth:`state_file` (if it exists)."""
        ...

    async def remove_tree(self, folder: str) -> None:
        """Delete a folder under the root and everything in it (if it exists)."""
        ...

    def file_path(self, path: str) -> str:
        """Validate the path of a file of any kind; return its relative form."""
        ...

    async def read_file(self, path: str) -> tuple[str, bytes]:
        """A file's name and bytes (imports)."""
        ...

    async def write_files(self, files: Mapping[str, bytes], *, overwrite: bool) -> None:
        """Write files atomically, all or none refused (exports)."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """What a store can do beyond the rest of the ``NotebookStore`` interface: its
    ``capabilities`` property (the workspace asks this, never the store's type or attributes)."""

    files: LocalFiles | None = None
    """Set when notebooks are files on this machine (file mode)."""
    documents: DocumentStore | None = None
    """Set when files other than notebooks are served (the document tools)."""
    sessions: LiveSessions | None = None
    """Set when notebooks can be held open as live collaboration sessions."""
    run_state: RunState | None = None
    """Set when running cells' outputs stream into shared cells, which show JupyterLab's run
    state (live rooms)."""
    output_interval: float = 2.0
    """Seconds between saves of a running cell's outputs."""
    background: Callable[[TaskGroup], None] | None = None
    """Starts the store's background tasks in the task group the server runs."""
    state_key: str | None = None
    """Names the root for the state every nbrelay process on it shares (the run journal): the
    real root folder, or the Jupyter Server's URL; None shares nothing."""
