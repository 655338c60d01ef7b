"""The nbrelay exception family: every error an agent can read, each with a next step.

Hierarchy:

* NbrelayError                  base; ``message`` says what went wrong, ``hint`` what to do next
  + InvalidArgument             a tool argument is malformed or out of range
    - CellNotFound              an index, id or range names no cell
  + PathError                   a path is outside the root, hidden, missing or not a notebook
    - NotebookNotFound          the path names no notebook
    - NotebookExists            create/import would overwrite an existing file
  + NotebookInvalid             the file is not valid JSON or fails nbformat validation
  + ConflictError               the notebook changed since the caller's version (carries ``current``)
  + UndoRefused                 undo would overwrite changes made after the edit being undone
  + StoreError                  the notebook could not be written (disk, permissions, locks)
  + KernelError                 a kernel could not start, died, or refused a request
  + RemoteError                 a Jupyter Server answered with an error or could not be reached
  + Unsupported                 the request needs something this machine or mode cannot provide

Only ``nbrelay.tools._boundary`` turns these into MCP ``ToolError`` results.

**Words.** Errors are raised far from the tools an agent called, and each profile has its own
tools, parameters and index base. So messages and hints never name a tool: they refer to an
action with ``act("missing")`` and to a cell position with ``cell_number(3)``, and the boundary
renders them in the words of the profile being served (``Vocabulary``). ``str(error)`` renders
them as the canonical profile says them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters: never in a message by chance
_MARK = re.compile(f"{_OPEN}([^{_CLOSE}]*){_CLOSE}")


def act(name: str) -> str:
    """A reference to an action ("missing": how to find or create a notebook, ...), rendered in
    the words of the profile the error reaches (``Vocabulary.words``)."""
    return f"{_OPEN}{name}{_CLOSE}"


def cell_number(index: int) -> str:
    """A 0-based cell index, rendered as the profile numbers cells."""
    return f"{_OPEN}#{index}{_CLOSE}"


# What every profile says when it has no words of its own for an action: no tool names.
NEUTRAL: Mapping[str, str] = {
    "index_rule": "Indexes are 0-based.",
    "see_cells": "Read the notebook to see its cells.",
    "read_again": "Read the notebook again and retry.",
    "stale": "Read the notebook again and redo the edit against the new version.",
    "positions": "Read the notebook again and retry.",
    "reread_cell": "Read the cell again and redo your edit on its current source.",
    "missing": "Check the path: it is relative to the root folder.",
    "list_all": "Leave the folder out to list everything.",
    "see_paths": "Give a path relative to the root folder.",
    "exists": "Pick another path.",
    "read_it": "Read it first.",
    "read_later": "Read it again in a minute, or create it under another name.",
    "insert_rule": "New cells are placed before the cell at that index.",
    "restart": "restart the kernel",
    "interrupt": "interrupt it",
    "poll": "Wait for the run to end",
    "start_kernel": "Run a cell to start one.",
    "save_state": "Save the kernel's state first.",
    "run_first": "Run it first",
    "set_kernel": "Set the notebook's kernelspec to one of them.",
}

# The canonical profile's words (also what ``str(error)`` says).
CANONICAL: Mapping[str, str] = {
    **NEUTRAL,
    "index_rule": "Indexes are 0-based; -1 is the last cell.",
    "see_cells": "Call read_notebook to see the cells.",
    "read_again": "Call read_notebook and try again.",
    "stale": "Read the notebook again (read_notebook) and redo the edit against the new version.",
    "positions": "Read the notebook again, or address cells by id.",
    "reread_cell": "Read the cell again (read_cell) and redo your edit on its current source, "
    "or change only the text you mean with find/replace.",
    "missing": "Call list_notebooks to see the notebooks, or create_notebook to make it.",
    "list_all": "list_notebooks with no folder lists all.",
    "see_paths": "Give a path relative to the root; list_notebooks shows what is there.",
    "exists": "Pick another path, or pass overwrite=true to replace it.",
    "read_it": "Read it with read_notebook, or pass overwrite=true to replace it.",
    "read_later": "Read it with read_notebook in a minute, or create it under another name.",
    "insert_rule": "Indexes are 0-based; new cells are placed before the cell at that index.",
    "restart": "call restart_kernel",
    "interrupt": "interrupt it (interrupt_kernel)",
    "poll": "Wait for the run to end (get_execution)",
    "start_kernel": "Run a cell with execute to start one; list_kernels shows the running kernels.",
    "save_state": "Call save_kernel_state first.",
    "run_first": "Run it first (execute)",
    "set_kernel": "Switch the notebook to one of them: notebook_metadata(path=…, kernel=…).",
}


@dataclass(frozen=True)
class Vocabulary:
    """How a profile says things: its words for each action (``NEUTRAL`` fills the gaps) and
    the number of its first cell."""

    words: Mapping[str, str] = field(default_factory=dict)
    index_base: int = 0

    def render(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("#"):
                index = int(name[1:])
                return str(index + self.index_base if index >= 0 else index)
            return self.words.get(name, NEUTRAL.get(name, ""))

        return _MARK.sub(one, text) if _OPEN in text else text


CANONICAL_WORDS = Vocabulary(CANONICAL)


class NbrelayError(Exception):
    """Base of every error nbrelay reports to an agent."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.raw_message = message
        self.raw_hint = hint

    @property
    def message(self) -> str:
        """What went wrong (in the canonical profile's words)."""
        return CANONICAL_WORDS.render(self.raw_message)

    @message.setter
    def message(self, value: str) -> None:
        self.raw_message = value

    @property
    def hint(self) -> str:
        """What to do next (in the canonical profile's words)."""
        return CANONICAL_WORDS.render(self.raw_hint)

    @hint.setter
    def hint(self, value: str) -> None:
        self.raw_hint = value

    def render(self, words: Vocabulary = CANONICAL_WORDS) -> str:
        """The message and hint in the words of a profile."""
        # A message that ends with a block (a diff) ends with a newline: the hint follows it.
        sep = "" if self.raw_message.endswith("\n") else " "
        raw = f"{self.raw_message}{sep}{self.raw_hint}" if self.raw_hint else self.raw_message
        return words.render(raw)

    def __str__(self) -> str:
        return self.render()


class InvalidArgument(NbrelayError):
    """A tool argument is malformed or out of range."""


class CellNotFound(InvalidArgument):
    """An index, id or range names no cell of the notebook."""


class PathError(NbrelayError):
    """A path is outside the root, hidden, not a regular file, or otherwise refused."""


class NotebookNotFound(PathError):
    """The path names no notebook."""


class NotebookExists(PathError):
    """Creating the notebook would overwrite an existing file."""


class NotebookInvalid(NbrelayError):
    """The notebook is not valid JSON or fails nbformat validation."""


class ConflictError(NbrelayError):
    """The notebook changed since the version the caller based its edit on."""

    def __init__(self, message: str, *, current: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.current = current


class UndoRefused(NbrelayError):
    """Undo would overwrite changes made after the edit being undone."""


class StoreError(NbrelayError):
    """The notebook could not be read or written for a reason outside the caller's control."""


class KernelError(NbrelayError):
    """A kernel could not start, died, or refused a request."""


class RemoteError(NbrelayError):
    """A Jupyter Server answered with an error or could not be reached."""


class AccessDenied(NbrelayError):
    """Who the operation is done for may not do it (in Jupyter: its authorizer refused)."""


class Unsupported(NbrelayError):
    """The request needs something this machine or mode cannot provide."""
