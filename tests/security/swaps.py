"""A real attacker for check-then-use races: a separate process that exchanges pairs of names
atomically, in a tight loop (``renameat2(RENAME_EXCHANGE)`` through ctypes), typically a real
folder or file inside the root with a symlink to one outside it, so that at every moment either
name may be either thing."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

SWAPPER = r"""
import ctypes, os, random, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pause = float(sys.argv[1])
names = sys.argv[2:]
pairs = [(a.encode(), b.encode()) for a, b in zip(names[0::2], names[1::2])]
def exchange(a, b):
    if hasattr(libc, "renameat2"):
        return libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
    return libc.syscall(316, -100, a, -100, b, 2)  # x86_64 renameat2
print("swapping", flush=True)
n = 0
while True:
    for a, b in pairs:
        if exchange(a, b) == 0:
            n += 1
    if pause:  # random, so that a caller's own rhythm cannot lock onto one state
        time.sleep(random.uniform(0, 2 * pause))
    elif n % 64 == 0:
        os.sched_yield()
"""


@contextlib.contextmanager
def exchanging(pairs: Sequence[tuple[Path, Path]], *, pause: float = 0.0) -> Iterator[None]:
    """Keep exchanging each pair of names until the block ends (the process is then killed),
    waiting about ``pause`` seconds between rounds (0: as fast as it can)."""
    names = [str(p) for pair in pairs for p in pair]
    proc = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(pause), *names],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "swapping"
        yield
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
