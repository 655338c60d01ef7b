"""The workspace: the one service API every tool of every profile calls.

It owns the store (where notebooks live), the kernels (where code runs) and the edit history that
``undo`` reverts, and turns each editing request into a planner that the store runs against the
freshest notebook under its lock. Cell references are resolved inside the planner, never against
an older read.

``Workspace`` (``facade.py``) is a thin facade over parts that each own their state and are given
their dependencies: ``Notebooks`` (reads, the edit primitive, undo history, views) ← ``Editing``;
``Kernels`` (runners, slots, suspension) ← ``Runs`` (jobs) and ``Inspect`` (variables, state,
packages, visualisation); ``Transfer`` (export/import), ``Sessions`` and ``Documents``.
"""

from nbrelay.workspace.editing import UndoOutcome
from nbrelay.workspace.facade import Workspace
from nbrelay.workspace.inspecting import validate_requirements
from nbrelay.workspace.jobbook import history_entries
from nbrelay.workspace.sessions import NotebookSession, file_id
from nbrelay.workspace.transfer import ExportOutcome

__all__ = [
    "ExportOutcome",
    "NotebookSession",
    "UndoOutcome",
    "Workspace",
    "file_id",
    "history_entries",
    "validate_requirements",
]
