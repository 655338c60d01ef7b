"""A map bounded by the bytes its entries hold, least recently used evicted first.

The file store keeps each notebook it has read parsed (and, once it has written it, its cells'
bytes), so that a read needs one ``stat``. Held without a bound, an agent that opens many big
notebooks keeps all of them: more than twice their bytes of memory for as long as the server
runs. With the bound, the notebooks used least recently are dropped (and read again from the
file when next used); the entry added last is always kept, however big.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class BytesLRU(Generic[V]):
    """``key → value``, each weighing ``weigh(key, value)`` bytes (fixed when set); at most
    ``limit`` bytes in all, beyond the most recent entry. ``dropped(key)`` is called for each
    entry evicted. Safe to use from worker threads and the event loop at once."""

    def __init__(
        self,
        limit: int,
        weigh: Callable[[str, V], int],
        dropped: Callable[[str], None] = lambda key: None,
    ) -> None:
        self.limit = limit
        self._weigh = weigh
        self._dropped = dropped
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.held = 0  # bytes held now, by the entries' weights
        self.evicted = 0  # entries evicted so far

    def get(self, key: str) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def __getitem__(self, key: str) -> V:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: V) -> None:
        weight = self._weigh(key, value)
        gone: list[str] = []
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.held -= old[1]
            self._items[key] = (value, weight)
            self.held += weight
            while self.held > self.limit and len(self._items) > 1:
                first, (_, w) = self._items.popitem(last=False)
                self.held -= w
                self.evicted += 1
                gone.append(first)
        for first in gone:
            self._dropped(first)

    def pop(self, key: str, default: V | None = None) -> V | None:
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return default
            self.held -= item[1]
            return item[0]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.held = 0

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)
