"""The store interface: where a notebook lives (files on disk, a Jupyter Server, a live room).

The workspace is the only caller. A store hands out immutable snapshots and applies edits under
its own concurrency control: ``edit`` calls the planner against the freshest content while it
holds the notebook's lock, so a plan can never be made against one version and applied to
another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import Notebook

Planner = Callable[[Notebook], Plan]


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


@dataclass(frozen=True)
class EditOutcome:
    """The result of one ``edit``: the snapshots either side and the plan that was applied."""

    before: Snapshot
    after: Snapshot
    plan: Plan
    changed_outside: bool = False


@dataclass(frozen=True)
class Entry:
    """A notebook found by ``list``: its path relative to the root, size and mtime."""

    path: str
    size: int
    modified: float
    notes: tuple[str, ...] = field(default_factory=tuple)


class NotebookStore(Protocol):
    """Where notebooks live. Paths are relative to the store's root, with ``/`` separators."""

    mode: str

    async def list(self, folder: str, *, recursive: bool) -> list[Entry]:
        """List the notebooks under ``folder``. Called by ``Workspace.list_notebooks``."""
        ...

    async def load(self, path: str) -> Snapshot:
        """Return the current snapshot. Called by every read; must be cheap when unchanged."""
        ...

    async def create(self, path: str, notebook: Notebook, *, overwrite: bool) -> Snapshot:
        """Create (or, if asked, replace) a notebook. Called by create and import tools."""
        ...

    async def edit(
        self,
        path: str,
        planner: Planner,
        *,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        """Plan against the freshest content and apply it atomically.

        Refuses with ``ConflictError`` when ``expected_version`` is given and differs, or when
        ``guard_positions`` is set (the plan addresses cells by position) and the notebook was
        changed by someone else since this store last saw it. Called by ``Workspace.edit``.
        """
        ...

    async def remove(self, path: str) -> None:
        """Delete a notebook. Called by the document tools of compatibility profiles."""
        ...

    async def rename(self, src: str, dst: str, *, overwrite: bool, keep_source: bool) -> Snapshot:
        """Move (or copy, with ``keep_source``) a notebook to a new path."""
        ...

    def relative(self, path: str) -> str:
        """Validate a notebook path and return its normal relative form (raises PathError)."""
        ...

    async def aclose(self) -> None:
        """Release connections and locks. Called once when the server stops."""
        ...
