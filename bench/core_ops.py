"""Read and single-cell edit on 100 / 1,000 / 5,000-cell notebooks, against floors measured in
the same run.

Floors:
* read: ``nbformat.reads`` of the same bytes (what any Jupyter tool pays to open a notebook);
* edit: ``json.loads`` + ``json.dumps(indent=1, sort_keys=True)`` + write to a temp file + fsync +
  ``os.replace`` of the same file (the least a safe single-cell save can cost).

nbrelay is measured through its file store: a cold read (parse + validate, as after an outside
change), a warm read (the notebook is cached and revalidated by stat), and a single-cell edit
(lock, re-hash, plan, apply, validate the changed cell, serialise, atomic write, re-hash).
Targets: read ≤ 1.5× and edit ≤ 2× the floor.

Run: ``python bench/core_ops.py`` (prints a table; not part of the test run).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import nbformat

from nbrelay.caller import ANYONE
from nbrelay.notebook import edits
from nbrelay.notebook.model import new_cell, new_notebook, serialize
from nbrelay.stores.files import FileStore

SIZES = (100, 1000, 5000)


def make_notebook(n: int) -> bytes:
    cells = []
    for i in range(n):
        cell = new_cell("code", f"x_{i} = {i}\nprint(x_{i} * 2)\n# a comment line", f"c{i}")
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": f"{i * 2}\n" * 3}]
        cell["execution_count"] = i + 1
        cells.append(cell)
    return serialize(new_notebook(cells))


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def floor_edit(path: Path) -> None:
    data = json.loads(path.read_bytes())
    data["cells"][1]["source"] = ["y = 1\n"]
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    tmp = path.with_name("." + path.name + ".floor")
    with open(tmp, "wb") as fh:
        fh.write(text.encode())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


Row = tuple[int, float, float, float, float, float]


def measure_size(root: Path, n: int) -> Row:
    raw = make_notebook(n)
    repeat = 30 if n <= 1000 else 8
    text = raw.decode()
    floor_read = median_time(lambda: nbformat.reads(text, as_version=4), repeat)  # type: ignore[no-untyped-call]
    (root / "floor.ipynb").write_bytes(raw)
    floor_write = median_time(lambda: floor_edit(root / "floor.ipynb"), repeat)
    (root / "nb.ipynb").write_bytes(raw)
    store = FileStore(root, lock_dir=root / ".locks")
    counter = iter(range(10**9))

    async def cold_read() -> None:
        store._cache.clear()  # as after an outside change
        await store.load("nb.ipynb", ANYONE)

    async def warm_read() -> None:
        await store.load("nb.ipynb", ANYONE)

    async def edit() -> None:
        k = next(counter)
        await store.edit(
            "nb.ipynb",
            ANYONE,
            lambda nb: edits.plan_set_source(nb, 1, f"y = {k}\n"),
            expected_version=None,
            guard_positions=False,
        )

    async def timed(fn: Callable[[], Awaitable[None]]) -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            await fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    # One event loop for all calls, so loop start-up is not measured.
    async def measure() -> tuple[float, float, float]:
        await warm_read()
        return await timed(cold_read), await timed(warm_read), await timed(edit)

    cold, warm, edit_t = anyio.run(measure)
    return (n, floor_read, cold, warm, floor_write, edit_t)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure_size(Path(tmp), n) for n in SIZES]
    print(
        f"{'cells':>6} {'reads floor':>12} {'cold read':>10} {'ratio':>6} {'warm read':>10} "
        f"{'ratio':>6} {'edit floor':>11} {'edit':>9} {'ratio':>6}"
    )
    for n, fr, cold, warm, fw, ed in rows:
        print(
            f"{n:>6} {fr * 1e3:>10.2f}ms {cold * 1e3:>8.2f}ms {cold / fr:>5.2f}x "
            f"{warm * 1e3:>8.3f}ms {warm / fr:>5.3f}x {fw * 1e3:>9.2f}ms {ed * 1e3:>7.2f}ms "
            f"{ed / fw:>5.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
