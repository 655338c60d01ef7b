"""``Workspace``: the one service API every tool of every profile calls, as a thin facade over
the parts that do the work, each with its dependencies given explicitly:

* ``notebooks`` (``Notebooks``): reads, creation, the edit primitive, undo history, views;
* ``editing`` (``Editing``): cell edits and undo, as planners run by ``notebooks.edit``;
* ``kernels`` (``Kernels``): a runner per notebook, slots, suspension, kernel requests;
* ``runs`` (``Runs``): executions as jobs, their outputs saved through ``notebooks.edit``;
* ``inspect`` (``Inspect``): variables, visualisation, packages, saved kernel state;
* ``transfer`` (``Transfer``): export and import;
* ``notebook_sessions`` (``Sessions``) and ``documents`` (``Documents``).

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
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.runners import Kernels
from nbrelay.workspace.runs import Runs
from nbrelay.workspace.sessions import Sessions
from nbrelay.workspace.slots import KernelSlots
from nbrelay.workspace.state_files import StateFiles
from nbrelay.workspace.transfer import Transfer

T = TypeVar("T")


class Workspace:
    """The one service API every tool of every profile calls (see the module docstring)."""

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
        jobs = JobBook()
        self.kernels = Kernels(
            settings,
            self.notebooks,
            self.state_files,
            jobs,
            provider=kernels,
            make_provider=kernel_factory or self._local_kernels,
        )
        self.runs = Runs(settings, self.notebooks, self.kernels, jobs)
        self.editing = Editing(self.notebooks)
        self.inspect = Inspect(settings, self.notebooks, self.kernels, self.state_files)
        self.transfer = Transfer(settings, self.notebooks)
        self.notebook_sessions = Sessions(self.notebooks, self.kernels)
        self.documents = Documents(self.notebooks, self.transfer, self.notebook_sessions)

        notebooks = self.notebooks  # reading, creating, the edit primitive, views
        self.relative = notebooks.relative
        self.peek = notebooks.peek
        self.list_notebooks = notebooks.list_notebooks
        self.read = notebooks.read
        self.search = notebooks.search
        self.view = notebooks.view
        self.unchanged_since_viewed = notebooks.unchanged_since_viewed
        self.create_notebook = notebooks.create_notebook
        self.create_from = notebooks.create_from
        self.save = notebooks.save
        self.edit = notebooks.edit

        editing = self.editing  # cell edits and undo
        self.set_sources = editing.set_sources
        self.insert_cells = editing.insert_cells
        self.edit_cell = editing.edit_cell
        self.delete_cells = editing.delete_cells
        self.move_cells = editing.move_cells
        self.merge_cells = editing.merge_cells
        self.split_cell = editing.split_cell
        self.clear_outputs = editing.clear_outputs
        self.replace_in_cells = editing.replace_in_cells
        self.undo = editing.undo
        self.set_notebook_metadata = editing.set_notebook_metadata

        runs = self.runs  # executions
        self.timeout_for = runs.timeout_for
        self.execute = runs.execute
        self.execution_history = runs.execution_history
        self.job = runs.job
        self.jobs_of = runs.jobs_of
        self.wait_job = runs.wait_job
        self.cancel_job = runs.cancel_job

        kernels_ = self.kernels  # kernels and their limits
        self.require_execution = kernels_.require_execution
        self.check_session_room = kernels_.check_session_room
        self.kernel_info = kernels_.kernel_info
        self.interrupt_kernel = kernels_.interrupt_kernel
        self.restart_kernel = kernels_.restart_kernel
        self.shutdown_kernel = kernels_.shutdown_kernel
        self.list_kernels = kernels_.list_kernels
        self.switch_kernel = kernels_.switch_kernel

        inspect = self.inspect  # looking inside the kernel
        self.visualize_cell = inspect.visualize_cell
        self.visualize_value = inspect.visualize_value
        self.evaluate_json = inspect.evaluate_json
        self.forget_saved_state = inspect.forget_saved_state
        self.list_variables = inspect.list_variables
        self.inspect_variable = inspect.inspect_variable
        self.install_packages = inspect.install_packages
        self.save_kernel_state = inspect.save_kernel_state
        self.restore_kernel_state = inspect.restore_kernel_state
        self.state_file = self.state_files.state_file
        self.session_state_file = self.state_files.session_state_file

        self.export_notebook = self.transfer.export_notebook
        self.import_notebook = self.transfer.import_notebook

        sessions = self.notebook_sessions  # notebooks held open
        self.begin_session = sessions.begin_session
        self.end_session = sessions.end_session
        self.sessions = sessions.listing

        documents = self.documents  # any file or folder under the root
        self.list_documents = documents.list_documents
        self.document = documents.document
        self.last_modified = documents.last_modified
        self.document_exists = documents.document_exists
        self.read_document = documents.read_document
        self.create_document = documents.create_document
        self.delete_document = documents.delete_document
        self.move_document = documents.move_document

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


async def _release_memory() -> None:
    """Every few seconds, give the C heap's free pages back to the system: kernel output floods,
    big results and saves leave megabytes there that would otherwise count as the server's
    memory from then on (a fraction of a millisecond each time). The allocator is tuned once
    for the process by ``process.setup``."""
    while True:
        await anyio.sleep(5)
        release_memory()
