"""The workspace: the one service API every tool of every profile calls.

It owns the store (where notebooks live), the kernels (where code runs) and the edit history that
``undo`` reverts, and turns each editing request into a planner that the store runs against the
freshest notebook under its lock. Cell references are resolved inside the planner, never against
an older read.

It is built in layers, each a class extending the one before, each in its own module:
``core`` (state, reading, the edit primitive) → ``editing`` → ``running`` (kernels and
executions) → ``inspecting`` (variables, state, packages, visualisation) → ``services``
(export/import, sessions, documents): ``Workspace``.
"""

from nbrelay.workspace.core import (
    CoreWorkspace,
    ExportOutcome,
    NotebookSession,
    UndoOutcome,
    file_id,
)
from nbrelay.workspace.inspecting import validate_requirements
from nbrelay.workspace.running import history_entries
from nbrelay.workspace.services import Workspace

__all__ = [
    "CoreWorkspace",
    "ExportOutcome",
    "NotebookSession",
    "UndoOutcome",
    "Workspace",
    "file_id",
    "history_entries",
    "validate_requirements",
]
