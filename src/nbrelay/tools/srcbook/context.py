"""What Srcbook's tools share: the workspace, its sessions, the execution timeout the document
defaults to, the event every change ends with, and the profile's error words."""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp.server.mcpserver import Context

from nbrelay.config import OPTION_BY_NAME, Settings
from nbrelay.errors import Vocabulary
from nbrelay.tools.srcbook.views import Events
from nbrelay.workspace import Workspace
from nbrelay.workspace.srcbook_sessions import Sessions, sessions_of

DEFAULT_TIMEOUT_MS = 30_000
EXPORT_MAX_CHARS = 1_000_000

_AGAIN = (
    "Read the session's state (resource notebook://session/{session_id}/state) to see the "
    "notebook as it is now, then retry."
)
# How errors say things here (see nbrelay.errors): this profile's tools and resources.
WORDS = Vocabulary(
    {
        "index_rule": "Positions are 0-based; cells are addressed by cell_id.",
        "see_cells": "The session's state (resource notebook://session/{session_id}/state) "
        "lists the cells.",
        "read_again": _AGAIN,
        "stale": _AGAIN,
        "positions": _AGAIN,
        "missing": "notebook_list shows the sessions; notebook_create starts one.",
        "start_kernel": "Run a cell with cell_execute to start one.",
        "run_first": "Run it first (cell_execute)",
    }
)


@dataclass
class Served:
    """The workspace and its Srcbook sessions (``workspace/srcbook_sessions.py``)."""

    ws: Workspace
    sessions: Sessions = field(init=False)

    def __post_init__(self) -> None:
        self.sessions = sessions_of(self.ws)

    @property
    def settings(self) -> Settings:
        return self.ws.settings

    def default_timeout_ms(self) -> float:
        """The document's 30000 ms, unless the server was given another execution timeout."""
        if self.settings.execution_timeout == OPTION_BY_NAME["execution_timeout"].default:
            return DEFAULT_TIMEOUT_MS
        return self.settings.execution_timeout * 1000

    async def changed(self, ctx: Context | None, session_id: str) -> None:
        """Tell the session's listeners its state changed (``notebook.state.changed``)."""
        await Events(ctx, session_id, self.sessions.record).emit("notebook.state.changed")
