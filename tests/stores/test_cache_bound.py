"""The file store keeps notebooks parsed within a bound of bytes: opening notebooks past it
drops the least recently used (read again from the file when next used), never the one in use."""

from __future__ import annotations

import gc
import os
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from nbrelay.caller import ANYONE, Caller
from nbrelay.config import load
from nbrelay.errors import InvalidArgument
from nbrelay.notebook import edits
from nbrelay.notebook.model import Sources, new_cell, new_notebook, parse, serialize
from nbrelay.server import build_workspace
from nbrelay.stores.base import Snapshot
from nbrelay.stores.editing import Readers
from nbrelay.stores.files import FileStore

pytestmark = pytest.mark.anyio

CELLS = 200


def write(path: Path, tag: str) -> int:
    cells = [new_cell("code", f"x_{i} = '{tag}' * {i}", f"c{i}") for i in range(CELLS)]
    path.write_bytes(serialize(new_notebook(cells)))
    past = os.stat(path).st_mtime_ns - 10**10  # settled: its stat alone proves it unchanged
    os.utime(path, ns=(past, past))
    return path.stat().st_size


async def test_opening_notebooks_past_the_bound_evicts_the_least_recently_used(
    tmp_path: Path,
) -> None:
    sizes = [write(tmp_path / f"n{i}.ipynb", f"t{i}") for i in range(6)]
    limit = sizes[0] * 5 // 2  # room for two notebooks, not three
    store = FileStore(tmp_path, lock_dir=tmp_path / ".locks", cache_bytes=limit)
    for i in range(6):
        await store.load(f"n{i}.ipynb", ANYONE)
        assert store._cache.held <= max(limit, sizes[i])
    assert store._cache.held == sizes[4] + sizes[5]

    before = replace(store.work)
    await store.load("n5.ipynb", ANYONE)  # kept: one stat, nothing read
    assert store.work.bytes_hashed == before.bytes_hashed
    await store.load("n0.ipynb", ANYONE)  # evicted: read and hashed again
    assert store.work.bytes_hashed - before.bytes_hashed == sizes[0]
    assert store._cache.held == sizes[5] + sizes[0]  # n4 went, the least recently used


async def test_an_edited_notebook_counts_its_kept_bytes_and_an_evicted_one_still_edits_right(
    tmp_path: Path,
) -> None:
    sizes = [write(tmp_path / f"n{i}.ipynb", f"t{i}") for i in range(3)]
    store = FileStore(tmp_path, lock_dir=tmp_path / ".locks", cache_bytes=sizes[0] * 5 // 2)

    async def edit(name: str, source: str) -> None:
        await store.edit(
            name,
            ANYONE,
            lambda nb: edits.plan_set_source(nb, 1, source),
            expected_version=None,
            guard_positions=False,
        )

    await edit("n0.ipynb", "a = 1")  # parsed and its cells' bytes kept: about twice its size
    assert store._cache.held == 2 * (tmp_path / "n0.ipynb").stat().st_size
    await store.load("n1.ipynb", ANYONE)  # past the bound: n0 goes, with its cells' bytes
    assert "n0.ipynb" not in {Path(k).name for k in store._cell_bytes}
    assert store._cache.held == sizes[1]
    await edit("n0.ipynb", "b = 2")  # read again, encoded whole, written right
    raw = (tmp_path / "n0.ipynb").read_bytes()
    assert raw == serialize(parse(raw))
    assert parse(raw).cells[1]["source"] == "b = 2"


async def test_cache_mb_sets_the_bound_of_the_server_s_store_and_0_keeps_the_notebook_in_use(
    tmp_path: Path,
) -> None:
    sizes = [write(tmp_path / f"n{i}.ipynb", f"t{i}") for i in range(3)]
    lock_dir = str(tmp_path / ".locks")
    flags = {"root": str(tmp_path), "lock_dir": lock_dir, "no_execute": "1"}

    kept = build_workspace(load({**flags}, {"NBRELAY_CACHE_MB": "1"}, {}))
    store = cast(FileStore, kept.store)
    assert store._cache.limit == 2**20
    for i in range(3):
        await store.load(f"n{i}.ipynb", ANYONE)
    assert store._cache.held == sum(sizes)  # all three fit in 1 MiB

    only = build_workspace(load({**flags, "cache_mb": "0"}, {}, {}))
    store = cast(FileStore, only.store)
    for i in range(3):
        await store.load(f"n{i}.ipynb", ANYONE)
        assert store._cache.held == sizes[i]  # the notebook in use, and nothing else
    before = replace(store.work)
    await store.load("n2.ipynb", ANYONE)  # the one in use: one stat, nothing read
    assert store.work.bytes_hashed == before.bytes_hashed
    await store.load("n0.ipynb", ANYONE)  # dropped: read again
    assert store.work.bytes_hashed - before.bytes_hashed == sizes[0]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("-1", "'-1' is outside the accepted range 0-1,048,576"),
        ("lots", "'lots' is not a valid int"),
        ("1.5", "'1.5' is not a valid int"),
    ],
)
def test_a_bad_cache_mb_is_refused_naming_the_flag(value: str, problem: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        load({}, {"NBRELAY_CACHE_MB": value}, {})
    assert str(refused.value).startswith(f"--cache-mb (from $NBRELAY_CACHE_MB): {problem}")


async def test_what_a_reader_last_read_keeps_no_evicted_notebook_in_memory(
    tmp_path: Path,
) -> None:
    """A client that reads many notebooks keeps, for each, what a merge of its next edit needs
    (the cells' sources), not the notebook: the cache's bound is what decides the memory held."""
    output = {"output_type": "stream", "name": "stdout", "text": "x" * 5000}
    sizes = []
    for n in range(12):
        cells = [new_cell("code", f"y_{i} = {n}", f"c{i}") for i in range(120)]
        for cell in cells:
            cell["outputs"] = [output]
        path = tmp_path / f"big{n}.ipynb"
        path.write_bytes(serialize(new_notebook(cells)))
        sizes.append(path.stat().st_size)
    limit = sizes[0] * 5 // 2  # room for two notebooks, not three
    store = FileStore(tmp_path, lock_dir=tmp_path / ".locks", cache_bytes=limit)
    reader = Caller("reader")
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for n in range(12):
            await store.load(f"big{n}.ipynb", reader)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert store._cache.evicted == 10
    # Two notebooks are kept parsed (each about 2.5x its bytes); what the reader saw of the
    # other ten is their sources and ids. Holding the ten whole takes over 25x one's bytes.
    assert held < 10 * sizes[0], f"{held / sizes[0]:.1f}x one notebook's bytes held"

    # What the reader saw of an evicted notebook still serves the merge of its next edit: its
    # whole new source for a cell someone changed since is merged with that change.
    async def set_source(who: Caller, source: str) -> None:
        await store.edit(
            "big3.ipynb",
            who,
            lambda nb: edits.plan_set_source(nb, 2, source),
            expected_version=None,
            guard_positions=False,
        )

    await set_source(Caller("other"), "y_2 = 3\nprint(y_2)")
    await set_source(reader, "import math\ny_2 = 3")
    after = parse((tmp_path / "big3.ipynb").read_bytes())
    assert after.cells[2]["source"] == "import math\ny_2 = 3\nprint(y_2)"


async def test_readers_of_a_store_that_keeps_no_notebook_keep_only_the_sources() -> None:
    """The contents API's store keeps no notebook, so what readers saw is kept as the sources
    alone; a store that keeps notebooks (a cache, a room) keeps a view until it lets one go."""
    nb = new_notebook([new_cell("code", f"v = {i}", f"c{i}") for i in range(3)])
    for cell in nb.cells:
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "out"}]
    snap = Snapshot("n.ipynb", nb, "v1")
    reader = Caller("reader")
    expected = {"c0": "v = 0", "c1": "v = 1", "c2": "v = 2"}

    alone = Readers(notebooks_kept=False)
    await alone.remember("n.ipynb", reader, snap)
    seen = (await alone.last("n.ipynb", reader))[2]
    assert isinstance(seen, Sources)
    assert not seen.holds_cells
    assert dict(seen) == seen.as_dict() == expected

    keeping = Readers()
    await keeping.remember("n.ipynb", reader, snap)
    seen = (await keeping.last("n.ipynb", reader))[2]
    assert isinstance(seen, Sources)
    assert seen.holds_cells
    keeping.let_go("n.ipynb")
    own = (await keeping.last("n.ipynb", reader))[2]
    anyone = (await keeping.last("n.ipynb", ANYONE))[2]
    assert own is anyone  # the two entries shared one view: they share one smaller copy
    for who in (reader, ANYONE):  # the reader's own entry and the process-wide one
        seen = (await keeping.last("n.ipynb", who))[2]
        assert isinstance(seen, Sources)
        assert not seen.holds_cells
        assert dict(seen) == expected
