"""The notebooks a jupyter-mcp-server client has in use: names for paths, and the current one.

datalayer's server keeps one "current notebook" per server, switched by ``use_notebook`` and used
by every cell tool that is not given ``notebook_name``. Here the names are kept per server too
(that is the interface), but each name is only a path: every call resolves to a path and goes
through nbrelay's workspace, so two clients that name their notebooks on every call never race.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp.server.mcpserver.exceptions import ToolError

from nbrelay.caller import Caller
from nbrelay.notebook.model import Cell
from nbrelay.stores.base import Snapshot
from nbrelay.workspace import Workspace

NO_NOTEBOOK = "No active notebook. Use the use_notebook tool to activate a notebook first."


def not_connected(name: str, names: list[str]) -> str:
    return f"Notebook '{name}' is not connected. All currently connected notebooks: {names}"


@dataclass
class InUse:
    """The workspace, the notebooks in use by name (in the order they were first used) and the
    current one."""

    ws: Workspace
    paths: dict[str, str] = field(default_factory=dict)
    current: str | None = None

    @property
    def names(self) -> list[str]:
        return list(self.paths)

    def path_of(self, name: str | None) -> str:
        """The path of ``name`` (None: the current notebook); a tool error if it is not in use."""
        if name is None:
            if self.current is None:
                raise ToolError(NO_NOTEBOOK)
            return self.paths[self.current]
        if name not in self.paths:
            raise ToolError(f"Notebook '{name}' is not connected.")
        return self.paths[name]

    def forget(self, name: str) -> None:
        """Stop using ``name``; the current notebook becomes the first one left."""
        del self.paths[name]
        if self.current == name:
            self.current = next(iter(self.paths), None)

    async def read(self, caller: Caller, name: str | None) -> tuple[str, Snapshot]:
        """The notebook, read as the agent's view (what its next edits by index are checked
        against)."""
        path = self.path_of(name)
        return path, await self.ws.notebooks.read(path, caller)

    async def peek(self, caller: Caller, name: str | None) -> tuple[str, Snapshot]:
        """The notebook as it is now, without counting as the agent's view: an edit looks its
        cell up here and names it by the index the agent gave, so nbrelay refuses it when
        cells moved since the agent last looked."""
        path = self.path_of(name)
        return path, await self.ws.notebooks.peek(path, caller)


def cell_index(snap: Snapshot, index: int | None, cell_id: str | None) -> int:
    """The cell addressed by ``cell_id`` (it wins) or by ``index`` (not checked here)."""
    if cell_id is not None:
        ids = snap.notebook.ids
        if cell_id not in ids:
            raise ToolError(
                f"No cell {cell_id!r} in this notebook. It was deleted, or it belongs to another "
                "notebook. Read the notebook again for current cell ids."
            )
        return ids.index(cell_id)
    if index is None:
        raise ToolError("name the cell to act on, by cell_index or by cell_id")
    return index


def cell_indices(snap: Snapshot, indices: list[int] | None, wanted: list[str] | None) -> list[int]:
    """The cells addressed by ids (they win) or by indices (not checked here)."""
    if not indices and not wanted:
        raise ToolError("name the cells to act on, by cell_indices or by cell_ids")
    ids = snap.notebook.ids
    if wanted:
        missing = [w for w in wanted if w not in ids]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ToolError(
                f"No cell {missing[0]!r} in this notebook{more}. Read the notebook again for "
                "current cell ids."
            )
        return [ids.index(w) for w in wanted]
    return list(indices or [])


def cells_of(snap: Snapshot) -> list[Cell]:
    return list(snap.notebook.cells)
