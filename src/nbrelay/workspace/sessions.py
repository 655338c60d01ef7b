"""Notebooks held open for an agent: their kernel and, in live mode, their collaboration room."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass

from nbrelay.caller import Caller
from nbrelay.errors import Unsupported
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.runners import Kernels


@dataclass
class NotebookSession:
    """A notebook held open for an agent: its kernel and, in live mode, its room (epoch times)."""

    path: str
    session_id: str
    file_id: str
    live: bool
    started: float
    last_activity: float
    active: bool = True


def file_id(rel: str) -> str:
    """A stable id for a notebook path (file mode has no file id service)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "nbrelay:" + rel))


class Sessions:
    """The sessions of one workspace, by notebook path."""

    def __init__(self, notebooks: Notebooks, kernels: Kernels) -> None:
        self._notebooks = notebooks
        self._kernels = kernels
        self._sessions: dict[str, NotebookSession] = {}

    async def begin_session(self, path: str, caller: Caller) -> NotebookSession:
        """Open a notebook for work: start (or reuse) its kernel and, in live mode, join and keep
        its collaboration room. Beginning an open session again returns it."""
        snap = await self._notebooks.read(path, caller)
        now = time.time()
        found = self._sessions.get(snap.path)
        if found is not None and found.active:
            found.last_activity = now
            await self._kernels.runner(snap, caller)
            return found
        runner = await self._kernels.runner(snap, caller)
        session_id, fid, live = runner.session.info.kernel_id, file_id(snap.path), False
        live_sessions = self._notebooks.capabilities.sessions
        if live_sessions is not None:
            with contextlib.suppress(Unsupported):  # a server without collaboration
                session_id, fid = await live_sessions.open_session(snap.path, caller)
                live = True
        session = NotebookSession(snap.path, session_id, fid, live, now, now)
        self._sessions[snap.path] = session
        return session

    async def end_session(self, path: str, caller: Caller) -> NotebookSession | None:
        """Close a session: leave the live room (live mode) or shut down the notebook's kernel
        (file mode). None if the notebook had no open session."""
        rel = self._notebooks.relative(path)
        session = self._sessions.get(rel)
        if session is None or not session.active:
            return None
        if not session.live:
            await self._kernels.shutdown_kernel(rel, caller)
        elif (live_sessions := self._notebooks.capabilities.sessions) is not None:
            await live_sessions.close_session(rel)
        session.active = False
        session.last_activity = time.time()
        return session

    def listing(self, folder: str = "") -> list[NotebookSession]:
        """Sessions of notebooks under ``folder``: those begun (open or ended) and, as open
        sessions, notebooks whose kernel runs without one."""
        found = dict(self._sessions)
        kernels = self._kernels.current.running() if self._kernels.current is not None else []
        for info in kernels:
            if info.key not in found:  # a session ended stays ended; its kernel may run on
                found[info.key] = NotebookSession(
                    info.key, info.kernel_id, file_id(info.key), False, info.started, 0.0
                )
        for info in kernels:
            session = found[info.key]
            session.last_activity = max(session.last_activity, info.last_activity)
        prefix = folder.strip("/")
        return [
            s
            for key, s in sorted(found.items())
            if not prefix or key == prefix or key.startswith(prefix + "/")
        ]

    async def forget(self, rel: str, caller: Caller) -> None:
        """A notebook is going away (deleted or moved by ``caller``): stop its kernel, drop its
        state."""
        session = self._sessions.pop(rel, None)
        live = session is not None and session.active and session.live
        live_sessions = self._notebooks.capabilities.sessions
        if live and live_sessions is not None:
            await live_sessions.close_session(rel)
        await self._kernels.shutdown_kernel(rel, caller)
        await self._notebooks.forget(rel)
