"""Which kernel messages a connection may have missed, told by the kernel's message counter.

jupyter_client's ``Session`` (the one ipykernel and every kernel built on jupyter_client send
with) numbers the messages it sends: a message id is ``{session}_{pid}_{n}`` (jupyter_client 7
and later; ``{session}_{n}`` in 6.x), ``n`` counting up from 0 across every channel of the
kernel (IOPub, shell, control). A reader of the kernel's messages that knows the last one a
predecessor handled (the run journal keeps it) can tell, from the first ones it receives itself,
how many the kernel sent in between.

Those in between are not all lost: replies to other clients' requests (JupyterLab's, the
server's own) use the counter too and go only to them. So a gap says messages *may* be missing.
Ids of another form (kernels that use plain UUIDs, other client libraries) tell nothing: no gap.
A new kernel session (the kernel restarted, so its ``session`` changed) starts a new count and
is not a gap either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_ID = re.compile(r"([^\s_]+(?:_\d+)?)_(\d+)")


def counter(msg_id: object) -> tuple[str, int] | None:
    """``(sender, n)`` of a jupyter_client message id (sender: the kernel's session and
    process), None for an id of another form."""
    if not isinstance(msg_id, str):
        return None
    found = _ID.fullmatch(msg_id)
    if found is None:
        return None
    return found.group(1), int(found.group(2))


def header_id(msg: Mapping[str, Any]) -> str | None:
    """The message id of a message (its header's), None without one."""
    header = msg.get("header")
    value = header.get("msg_id") if isinstance(header, Mapping) else None
    return value if isinstance(value, str) and value else None


class Received:
    """The lowest counter seen per sender on one connection (fed every message it receives)."""

    def __init__(self) -> None:
        self._lowest: dict[str, int] = {}

    def see(self, msg: Mapping[str, Any]) -> None:
        parsed = counter(header_id(msg))
        if parsed is None:
            return
        sender, n = parsed
        low = self._lowest.get(sender)
        if low is None or n < low:
            self._lowest[sender] = n

    def lowest(self, sender: str) -> int | None:
        return self._lowest.get(sender)


def missing(last: str | None, received: Received) -> int:
    """How many messages the kernel sent after ``last`` (the id of the last message a
    predecessor handled) and before the first one ``received`` got from the same kernel
    session: 0 when none, or when that cannot be told (``last`` of another form, nothing
    received yet from its sender, a new kernel session)."""
    parsed = counter(last)
    if parsed is None:
        return 0
    sender, n = parsed
    first = received.lowest(sender)
    if first is None:
        return 0
    return max(first - n - 1, 0)
