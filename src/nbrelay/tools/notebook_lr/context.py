"""notebook-lr's current notebook: the state its path-less tools share, and how errors speak
there."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from mcp.server.mcpserver import Context

from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.errors import (
    CellNotFound,
    KernelError,
    NbrelayError,
    NotebookNotFound,
    PathError,
    Unsupported,
    Vocabulary,
)
from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.notebook import nblr, render
from nbrelay.notebook.model import Notebook, new_notebook
from nbrelay.stores.base import Snapshot
from nbrelay.tools.notebook_lr.views import NotebookInfo
from nbrelay.tools.runs import follow
from nbrelay.workspace import Workspace

T = TypeVar("T")

_AGAIN = "Call list_cells to see the notebook as it is now, then retry."
# How errors say things here (see nbrelay.errors): this profile's tools, zero-based indexes.
WORDS = Vocabulary(
    {
        "index_rule": "Indexes are zero-based.",
        "see_cells": "Call list_cells to see the cells.",
        "read_again": _AGAIN,
        "stale": _AGAIN,
        "positions": _AGAIN,
        "reread_cell": "Read the cell again (get_cell_source) and redo your edit on its current "
        "source, or change only the text you mean with replace_in_cells.",
        "missing": "Check the path: it is relative to the root folder.",
        "read_it": "Load it with load_notebook.",
        "read_later": "Load it with load_notebook in a minute, or save under another name.",
        "restart": "run the cell again (a new kernel starts)",
        "interrupt": "wait for it to end",
        "start_kernel": "Run a cell with execute_cell to start one.",
        "save_state": "Save it first with save_notebook(include_session=true).",
        "run_first": "Run it first (execute_cell)",
    }
)
FAILED = ("timeout", "died", "cancelled", "interrupted")


def as_ipynb(path: str) -> str:
    """In live mode a Jupyter Server holds the notebooks, and it knows only .ipynb: there a
    .nblr name means the .ipynb of the same name."""
    return path[: -len(".nblr")] + ".ipynb" if path.endswith(".nblr") else path


def ran_cells(job: Job) -> list[CellRun]:
    return [c for c in job.cells if c.status not in ("queued", "skipped")]


def check_finished(job: Job) -> None:
    """A run that timed out, lost its kernel or was stopped is an error, as in notebook-lr."""
    for cell in job.cells:
        if cell.status in FAILED:
            raise KernelError(
                f"Cell {cell.index} did not finish: {cell.message or cell.status}.",
                hint=f"The output it printed is saved in the cell (get_cell(index={cell.index})).",
            )
    if not job.done.is_set():
        raise KernelError(
            "the run did not end in time.", hint="Call execute_cell again once it has finished."
        )


@dataclass
class Current:
    """The notebook the path-less tools act on (shared by every client of this server), and
    what every tool needs beside it."""

    ws: Workspace
    path: str = ""

    def __post_init__(self) -> None:
        self.path = self.where(self.settings.notebook)

    @property
    def settings(self) -> Settings:
        return self.ws.settings

    def where(self, path: str) -> str:
        """A notebook path as the store names it: .nblr files where the store keeps them (file
        mode), else the .ipynb of the same name (see as_ipynb)."""
        try:
            return self.ws.notebooks.relative(path)
        except PathError:
            if path == as_ipynb(path):
                raise
            return self.ws.notebooks.relative(as_ipynb(path))

    def budget(self) -> render.Budget:
        return render.Budget(self.settings.output_budget, self.settings.output_budget)

    async def snapshot(self, caller: Caller) -> Snapshot | None:
        try:
            return await self.ws.notebooks.read(self.path, caller)
        except NotebookNotFound:
            return None

    async def notebook(self, caller: Caller) -> Notebook:
        snap = await self.snapshot(caller)
        return snap.notebook if snap is not None else new_notebook()

    async def on_current(self, op: Callable[[str], Awaitable[T]]) -> T:
        """Run ``op`` on the current notebook; one not created yet has no cells (nothing is
        created by a call that fails)."""
        try:
            return await op(self.path)
        except NotebookNotFound as exc:
            raise CellNotFound(
                f"the notebook has no cells: {self.path} does not exist yet.",
                hint="add_cell creates it with its first cell.",
            ) from exc

    def info(self, path: str | None, nb: Notebook) -> NotebookInfo:
        cells = nb.cells
        name = (nb.data.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            name = "Untitled"  # notebook-lr: notebook.metadata.get("name", "Untitled")
        return NotebookInfo(
            name=name,
            cell_count=len(cells),
            code_count=sum(1 for c in cells if c.get("cell_type") == "code"),
            markdown_count=sum(1 for c in cells if c.get("cell_type") == "markdown"),
            executed_count=sum(1 for c in cells if c.get("execution_count") is not None),
            version=self.version(nb),
            path=path,
        )

    def version(self, nb: Notebook) -> str:
        """The notebook's own format version, as notebook-lr reports it: a ``.nblr`` file's
        ``version`` ("1.0"), an ``.ipynb`` file's nbformat version."""
        kept = (nb.data.get("metadata") or {}).get("nblr")
        if isinstance(kept, dict) and isinstance(kept.get("version"), str):
            return str(kept["version"])
        if nblr.is_nblr(self.path):
            return nblr.VERSION
        return f"{nb.data.get('nbformat', 4)}.{nb.data.get('nbformat_minor', 0)}"

    async def carry_kernel(self, caller: Caller, source: str, target: str) -> str | None:
        """notebook-lr has one kernel for the notebook being worked on: after a save under a
        new name the variables must still be there. The kernel's variables move to the new
        notebook's kernel (saved and restored); what cannot move is said in the note."""
        try:
            found = await self.ws.inspect.save_kernel_state(source, caller, to=target)
            await self.ws.inspect.restore_kernel_state(target, caller)
        except NbrelayError as exc:  # not a Python kernel, no dill, a state it cannot read
            return (
                f"The kernel's variables stay with {source} ({exc.message}); cells run now start "
                "a fresh kernel."
            )
        await self.ws.kernels.shutdown_kernel(source, caller)
        skipped = found.get("skipped") or []
        if skipped:
            names = ", ".join(sorted(skipped))
            return f"The kernel's variables moved with the notebook, except: {names}."
        return None

    def no_code(self, what: str) -> None:
        if self.settings.no_execute or self.settings.read_only:
            raise Unsupported(
                f"{what} runs code in the kernel, and this server was started with "
                f"{'--read-only' if self.settings.read_only else '--no-execute'}.",
                hint="Call it with include_session=false.",
            )

    async def run(self, job: Job, ctx: Context | None) -> None:
        wait = job.timeout + self.settings.interrupt_grace + 60 if job.timeout else None
        await follow(self.ws, job, wait, ctx)
        if not job.done.is_set():
            await self.ws.runs.cancel_job(job)
        check_finished(job)
