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
    - ExecutionTimeout          a run exceeded its time limit
  + RemoteError                 a Jupyter Server answered with an error or could not be reached
  + Unsupported                 the request needs something this machine or mode cannot provide

Only ``nbrelay.tools._boundary`` turns these into MCP ``ToolError`` results.
"""

from __future__ import annotations


class NbrelayError(Exception):
    """Base of every error nbrelay reports to an agent."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} {self.hint}"
        return self.message


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


class ExecutionTimeout(KernelError):
    """A run exceeded its time limit."""


class RemoteError(NbrelayError):
    """A Jupyter Server answered with an error or could not be reached."""


class Unsupported(NbrelayError):
    """The request needs something this machine or mode cannot provide."""
