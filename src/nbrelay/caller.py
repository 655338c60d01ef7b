"""Who is calling: the value the tool boundary builds once per tool call, under which the state
that belongs to one client is kept (what it last read of each notebook, its undo history).

``Caller.key`` names, in this order: the MCP session (``Mcp-Session-Id`` over HTTP); for a
sessionless HTTP request (protocol 2026-07-28), the identity that authenticated it (its bearer
token, or in Jupyter its user), which whoever authenticates puts in the ASGI scope under
``IDENTITY_SCOPE_KEY``; the client's connection (stdio, the in-process client). ``ANYONE`` (key
"") is a call from no known client, or a call made without MCP. In Jupyter (the extension),
``Caller.jupyter`` is who Jupyter authenticated (its handler and user), whom its authorizer is
asked about before every operation; there, a caller that is neither that nor the server's own
work (``Caller.server("watching notebooks for the change feed")``: the feed's polling, stopping
idle kernels, resuming runs after a restart) is refused.

The boundary passes the caller to a tool function that declares ``caller: Caller``, and a
resource reader, an argument completion or a subscription's first look at a notebook is handed
the caller of its request the same way. Nothing reads the caller from a context: it is an
argument all the way down. The per-caller state (``PerCaller``) takes it, and so do reads,
edits, runs and undo (``workspace``), every operation of the stores (their notebooks, their
other files, their live sessions, the run state they show) and the kernels (the provider and
``execution.Runner``). In the extension the store asks Jupyter's authorizer about the caller it
is handed before each of these operations (``extension.store``). A run that outlasts its call
keeps the caller that started it (passed when it is launched); the server's own background work
(saving and leaving rooms, the change feed's polling, stopping idle kernels) passes a
``Caller.server`` that names it, or works below the operations that ask.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

# The ASGI scope key under which an authenticating layer says who sent a request.
IDENTITY_SCOPE_KEY = "nbrelay.identity"
# The ASGI scope key under which Jupyter's MCP handler puts who it authenticated (the extension).
JUPYTER_SCOPE_KEY = "nbrelay.jupyter_caller"


@dataclass(frozen=True)
class Caller:
    """One client of the server; ``key`` is "" for anyone (see the module docstring)."""

    key: str = ""
    jupyter: Any = field(default=None, compare=False)
    """In Jupyter: who it authenticated (``extension.access.JupyterUser``); None elsewhere."""
    work: str = ""
    """The server's own work: what it is doing (``Caller.server``); "" for a client's call."""

    @classmethod
    def server(cls, work: str) -> Caller:
        """The server acting on its own (no client asked): ``work`` says what it is doing."""
        return cls(work=work)

    @property
    def is_server(self) -> bool:
        return bool(self.work)


ANYONE = Caller()

V = TypeVar("V")


class PerCaller(Generic[V]):
    """Each caller's own values, by notebook path: one caller never sees another's.

    The values of at most ``limit`` callers are kept; past it, those of the caller that used
    them least recently are dropped (clients that went away leave theirs behind).
    """

    def __init__(self, limit: int = 1000) -> None:
        self._limit = limit
        self._by_caller: OrderedDict[str, dict[str, V]] = OrderedDict()

    def mine(self, caller: Caller) -> dict[str, V]:
        """``caller``'s values (made on first use), marked as just used."""
        key = caller.key
        found = self._by_caller.get(key)
        if found is None:
            found = self._by_caller[key] = {}
            while len(self._by_caller) > self._limit:
                self._by_caller.popitem(last=False)
        else:
            self._by_caller.move_to_end(key)
        return found

    def get(self, caller: Caller, path: str) -> V | None:
        """``caller``'s value for ``path``, if it has one."""
        found = self._by_caller.get(caller.key)
        return None if found is None else found.get(path)

    def forget(self, path: str) -> None:
        """Drop every caller's value for ``path`` (the notebook went away or was replaced)."""
        for values in self._by_caller.values():
            values.pop(path, None)
