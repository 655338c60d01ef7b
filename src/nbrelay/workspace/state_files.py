"""Where kernel state is kept: the files ``save_kernel_state`` and ``--persist-sessions`` write,
and the folder a notebook's kernel runs in.

In file mode a state file lives in a hidden folder next to its notebook (the file store checks
its real path; the kernel opens it by descriptors); with ``--session-dir`` it lives in that
folder, one file per notebook path. On a Jupyter Server (live and extension modes) it lives in
the hidden folder next to the notebook too, named relative to the kernel's own folder (where the
server starts a notebook's kernel): nbrelay cannot see those files, the kernel can.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
from collections.abc import Callable

import anyio
import anyio.to_thread

from nbrelay.config import Settings
from nbrelay.stores.base import Capabilities, LocalFiles
from nbrelay.stores.file_documents import STATE_FOLDER
from nbrelay.stores.paths import fitted

_SPARE = len(".partial")  # the kernel writes a state file as NAME.partial first (introspect)


class StateFiles:
    """State files and kernel folders of one workspace (``capabilities`` asks the store)."""

    def __init__(self, settings: Settings, capabilities: Callable[[], Capabilities]) -> None:
        self._settings = settings
        self._capabilities = capabilities

    def kernel_cwd(self, rel: str) -> str:
        """The folder a notebook's kernel runs in: the notebook's own (under the root in file
        mode; the server-side folder in live mode)."""
        folder = posixpath.dirname(rel)
        files = self._capabilities().files
        root = files.root if files is not None else None
        return os.path.normpath(os.path.join(str(root), folder)) if root is not None else folder

    def state_file(self, rel: str, suffix: str = ".dill") -> str:
        """Where a notebook's saved kernel state lives: a hidden folder next to it (in file
        mode, its real path, which the store checks and the kernel opens by descriptors), or
        --session-dir (one file per notebook path). Named after the notebook, shortened when
        that name with the suffixes would be too long for the file system."""
        name = posixpath.basename(rel)
        if self._settings.session_dir is not None:
            digest = hashlib.sha256(rel.encode("utf-8")).hexdigest()[:12]
            folder = os.path.realpath(self._settings.session_dir)
            return os.path.join(folder, fitted(name, suffix, prefix=f"{digest}-", spare=_SPARE))
        files = self._capabilities().files
        if files is not None:
            return files.state_file(rel, fitted(name, suffix, spare=_SPARE))
        # Relative to the kernel's folder, which is the notebook's (not to the server's root).
        return posixpath.join(STATE_FOLDER, fitted(name, suffix, spare=_SPARE))

    def session_state_file(self, rel: str) -> str:
        """Where a suspended session's variables are kept (with --persist-sessions)."""
        return self.state_file(rel, ".session.dill")

    @property
    def in_kernel(self) -> bool:
        """Whether state files are where only the kernel sees them (a Jupyter Server's kernel,
        without --session-dir): ask the kernel whether one exists."""
        return self._settings.session_dir is None and self._capabilities().files is None

    def _in_store(self) -> LocalFiles | None:
        """The file store that keeps state files under the root (None: --session-dir or live
        mode, where they are not under the root nbrelay serves)."""
        return self._capabilities().files if self._settings.session_dir is None else None

    async def exists(self, target: str) -> bool:
        """Whether a state file exists on this machine (False for one only the kernel sees:
        see ``in_kernel``)."""
        store = self._in_store()
        if store is not None:
            return await store.state_exists(target)
        if self.in_kernel:
            return False
        return await anyio.Path(target).exists()

    async def make_folder(self, target: str) -> None:
        """Make the parents of a --session-dir state file (under the root, the kernel makes
        the one folder it needs, .nbrelay-state, itself)."""
        if self._in_store() is None and os.path.isabs(target):
            parent = os.path.dirname(os.path.dirname(target))
            await anyio.to_thread.run_sync(lambda: os.makedirs(parent, exist_ok=True))

    async def remove(self, target: str) -> None:
        store = self._in_store()
        if store is not None:
            await store.remove_state(target)
            return
        if self.in_kernel:  # not a file of this machine: never one relative to nbrelay's cwd
            return
        with contextlib.suppress(FileNotFoundError):
            await anyio.Path(target).unlink()
