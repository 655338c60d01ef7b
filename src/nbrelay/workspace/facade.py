"""``Workspace``: the one service every tool of every profile is given. It builds the parts that
do the work, each with its dependencies given explicitly, runs their background work, and closes
them; tools call the parts themselves (``ws.editing.insert_cells``, ``ws.runs.execute``):

* ``notebooks`` (``Notebooks``): reads, creation, the edit primitive, undo history, views;
* ``editing`` (``Editing``): cell edits and undo, as planners run by ``notebooks.edit``;
* ``kernels`` (``Kernels``): a runner per notebook, slots, suspension, kernel requests;
* ``runs`` (``Runs``): executions as jobs, their outputs saved through ``notebooks.edit``;
* ``inspect`` (``Inspect``): variables, visualisation, packages, saved kernel state;
* ``transfer`` (``Transfer``): export and import;
* ``notebook_sessions`` (``Sessions``) and ``documents`` (``Documents``);
* ``state_files`` (``StateFiles``): where saved kernel state is kept.

All state is per workspace, held by these parts; state that a layer above keeps per workspace
(a profile's session registry, the tools' overview memo) is ``attached`` to it, and goes with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Self, TypeVar, cast

import anyio

from nbrelay.config import Settings
from nbrelay.kernels.base import KernelProvider
from nbrelay.notebook.model import IdFactory, random_id
from nbrelay.process import release_memory
from nbrelay.stores.base import Capabilities, NotebookStore
from nbrelay.workspace.documents import Documents
from nbrelay.workspace.editing import Editing
from nbrelay.workspace.inspecting import Inspect
from nbrelay.workspace.jobbook import JobBook
from nbrelay.workspace.journal import RunJournal
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.runners import Kernels
from nbrelay.workspace.runs import Runs
from nbrelay.workspace.sessions import Sessions
from nbrelay.workspace.slots import KernelSlots
from nbrelay.workspace.state_files import StateFiles
from nbrelay.workspace.transfer import Transfer

T = TypeVar("T")


class Workspace:
    """The parts every tool of every profile calls (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        store: NotebookStore,
        *,
        id_factory: IdFactory = random_id,
        kernels: KernelProvider | None = None,
        kernel_factory: Callable[[], KernelProvider] | None = None,
    ) -> None:
        """``kernels`` is where code runs; ``kernel_factory`` makes it when code first runs
        (the server passes one or the other). Without either, local kernels in the notebooks'
        folders."""
        self.settings = settings
        self.store = store
        self._attached: dict[type[Any], Any] = {}
        self.notebooks = Notebooks(settings, store, id_factory)
        self.state_files = StateFiles(settings, lambda: self.notebooks.capabilities)
        self.journal = RunJournal(self.notebooks.capabilities.state_key)
        jobs = JobBook(self.journal.new_number if self.journal.enabled else None)
        self.kernels = Kernels(
            settings,
            self.notebooks,
            self.state_files,
            jobs,
            provider=kernels,
            make_provider=kernel_factory or self._local_kernels,
        )
        self.runs = Runs(settings, self.notebooks, self.kernels, jobs, self.journal)
        self.editing = Editing(self.notebooks)
        self.inspect = Inspect(settings, self.notebooks, self.kernels, self.state_files)
        self.transfer = Transfer(settings, self.notebooks)
        self.notebook_sessions = Sessions(self.notebooks, self.kernels)
        self.documents = Documents(self.notebooks, self.transfer, self.notebook_sessions)

    def attached(self, kind: type[T], make: Callable[[Self], T]) -> T:
        """The one ``kind`` of state a layer above keeps for this workspace (a profile's session
        registry, the tools' overview memo): made by ``make`` on first use, gone with the
        workspace."""
        found = self._attached.get(kind)
        if found is None:
            found = self._attached[kind] = make(self)
        return cast(T, found)

    @property
    def capabilities(self) -> Capabilities:
        """What the store can do (asked each time: the live store learns late whether the
        server has real-time collaboration)."""
        return self.notebooks.capabilities

    @property
    def kernel_slots(self) -> KernelSlots:
        """The count of kernels running or starting (--max-sessions, --max-kernels)."""
        return self.kernels.slots

    def _local_kernels(self) -> KernelProvider:
        from nbrelay.kernels.local import local_kernels

        files = self.capabilities.files
        return local_kernels(
            self.settings,
            root=str(files.root) if files is not None else None,
            open_folder=files.open_kernel_folder if files is not None else None,
        )

    # -- lifetime -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Self]:
        """Run the background work (executions that outlast a call, the warm kernel pool, the
        idle-kernel reaper) while the server runs; close everything at the end."""
        try:
            async with anyio.create_task_group() as tg:
                self.kernels.attach(tg)
                if self.capabilities.background is not None:  # the live store's rooms
                    self.capabilities.background(tg)
                tg.start_soon(self.kernels.reap_idle)
                tg.start_soon(self.runs.resume_orphans)
                tg.start_soon(_release_memory)
                try:
                    yield self
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.kernels.save_sessions()
                    tg.cancel_scope.cancel()
        finally:
            self.kernels.attach(None)
            await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.kernels.aclose()
        await self.store.aclose()


async def _release_memory(every: float = 5.0) -> None:
    """Every few seconds, give the C heap's free pages back to the system: kernel output floods,
    big results and saves leave megabytes there that would otherwise count as the server's
    memory from then on. The allocator is tuned once for the process by ``process.setup``.

    In a worker thread: a fraction of a millisecond in nbrelay's own process, but inside a
    Jupyter Server holding big rooms (the extension) about 11 ms at 10,000 cells, which on the
    event loop every client of that server would wait behind."""
    while True:
        await anyio.sleep(every)
        await anyio.to_thread.run_sync(release_memory)
