"""The one limit on kernels running at once, as two options apply it.

A slot is a running kernel or one being started (reserved). ``--max-sessions`` refuses a notebook
that would start a kernel beyond its limit; ``--max-kernels`` queues it (first come, first
served) and makes room by stopping the least recently used idle kernel. Both count the same slots.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, act
from nbrelay.kernels.base import KernelProvider


class KernelSlots:
    """Kernel slots of one workspace. ``kernels`` gives the provider (None until code first
    runs); ``make_room(key, caller)`` stops an idle kernel other than ``key``'s for ``caller`` (who
    waits for a slot), False if all are busy."""

    def __init__(
        self,
        kernels: Callable[[], KernelProvider | None],
        make_room: Callable[[str, Caller], Awaitable[bool]],
    ) -> None:
        self._kernels = kernels
        self._make_room = make_room
        self._line = anyio.Lock()  # notebooks waiting for a slot, in order
        self._reserved: set[str] = set()  # given a slot, kernel not yet running

    def reserved(self, key: str) -> bool:
        """Whether ``key`` holds a slot whose kernel is still starting."""
        return key in self._reserved

    def _needs_slot(self, key: str) -> KernelProvider | None:
        kernels = self._kernels()
        if kernels is None or kernels.get(key) is not None or key in self._reserved:
            return None
        return kernels

    def _taken(self, kernels: KernelProvider) -> int:
        return len({k.key for k in kernels.running()} | self._reserved)

    def check(self, key: str, limit: int) -> None:
        """Refuse (``--max-sessions``) if ``key`` would start a kernel beyond ``limit``
        (0: no limit)."""
        kernels = self._needs_slot(key) if limit else None
        if kernels is None:
            return
        taken = self._taken(kernels)
        if taken >= limit:
            raise KernelError(
                f"{taken} kernels are running, the most this server allows "
                f"(--max-sessions {limit}), so {key!r} cannot start one.",
                hint="Wait until an idle kernel is stopped (--kernel-idle-timeout), or ask the "
                "person running nbrelay for a larger --max-sessions.",
            )

    async def reserve(self, key: str, caller: Caller, limit: int, wait: float) -> float | None:
        """Wait in line (``--max-kernels``) until ``key`` may start a kernel within ``limit``,
        at most ``wait`` seconds, and reserve the slot; the seconds waited (None: no slot was
        needed). Release it with :meth:`release` once the kernel runs (or failed to start)."""
        kernels = self._needs_slot(key) if limit else None
        if kernels is None:
            return None
        started = time.monotonic()
        try:
            with anyio.fail_after(wait):
                async with self._line:
                    while self._taken(kernels) >= limit:
                        if not await self._make_room(key, caller):
                            await anyio.sleep(0.1)
                    self._reserved.add(key)
        except TimeoutError as exc:
            raise KernelError(
                f"{key!r} waited {wait:g} s for a kernel: all "
                f"{limit} kernels this server runs at once (--max-kernels) stayed busy.",
                hint=f"Retry when a run has ended, or {act('interrupt')}.",
            ) from exc
        return time.monotonic() - started

    def release(self, key: str) -> None:
        self._reserved.discard(key)
