"""The file store re-encodes only the cells an edit made, and still writes exactly the bytes
nbformat's writer would: for every kind of edit, and for stream outputs long enough to be written
slice by slice (with every kind of line break)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import anyio
import nbformat
import pytest

from nbrelay.caller import ANYONE
from nbrelay.errors import ConflictError
from nbrelay.notebook import edits
from nbrelay.notebook.edits import CellSpec, Plan
from nbrelay.notebook.model import Notebook, new_cell, new_notebook, parse, serialize, version_of
from nbrelay.notebook.serialize import cell_bytes
from nbrelay.stores.base import EditOutcome
from nbrelay.stores.files import FileStore
from tests.helpers import counter_ids

pytestmark = pytest.mark.anyio

BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"]


def noisy_text(rng: random.Random, size: int) -> str:
    pieces: list[str] = []
    while sum(len(p) for p in pieces) < size:
        line = "".join(rng.choice('ab é"\\\t\x00\x1b[1m😀') for _ in range(rng.randrange(0, 40)))
        pieces.append(line + rng.choice(BREAKS))
    return "".join(pieces)


def long_stream_cell(rng: random.Random, cid: str) -> dict[str, object]:
    cell = new_cell("code", "for i in range(10**5):\n    print(i)", cid)
    cell["execution_count"] = 1
    cell["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": noisy_text(rng, 80_000)},
        {
            "output_type": "execute_result",
            "execution_count": 1,
            "data": {"text/plain": "done"},
            "metadata": {},
        },
        {
            "output_type": "stream",
            "name": "stderr",
            "text": "".join(f"{i}\n" for i in range(30_000)),
        },
    ]
    return cell


async def test_every_edit_writes_nbformats_bytes(tmp_path: Path) -> None:
    rng = random.Random(7)
    cells = [new_cell("code", f"x = {i}\nprint(x)", f"c{i}") for i in range(30)]
    cells[3] = long_stream_cell(rng, "big")
    cells[7] = new_cell("markdown", "# Title\n\nλ text", "md")
    path = tmp_path / "n.ipynb"
    path.write_bytes(serialize(new_notebook(cells)))
    store = FileStore(tmp_path, lock_dir=tmp_path / ".locks")
    ids = counter_ids("new")

    def output(nb: Notebook) -> Plan:
        i = nb.ids.index("c5")
        return Plan(
            edits=(
                edits.UpdateCell(
                    "c5",
                    {
                        "outputs": [
                            {
                                "output_type": "stream",
                                "name": "stdout",
                                "text": noisy_text(rng, 70_000),
                            }
                        ],
                        "execution_count": 3,
                    },
                ),
            ),
            touched=(nb.ids[i],),
        )

    planners = [
        lambda nb: edits.plan_set_source(nb, 0, "y = 'é'\n\"quoted\""),
        lambda nb: edits.plan_insert(nb, 2, [CellSpec("raw", "raw\r\ntext")], ids),
        lambda nb: edits.plan_delete(nb, [len(nb.cells) - 1]),
        lambda nb: edits.plan_move(nb, [4, 5], 0),
        output,
        lambda nb: edits.plan_set_source(nb, nb.ids.index("big"), "print('again')"),
        lambda nb: edits.plan_clear_outputs(nb, [nb.ids.index("c5")]),
    ]
    with anyio.fail_after(120):
        for planner in planners * 2:
            done = await store.edit(
                "n.ipynb", ANYONE, planner, expected_version=None, guard_positions=False
            )
            raw = path.read_bytes()
            expected = serialize(parse(raw))
            assert raw == expected
            assert raw == serialize(done.after.notebook)
    text = path.read_text(encoding="utf-8")
    assert nbformat.writes(nbformat.reads(text, as_version=4)) + "\n" == text


async def test_an_outside_change_is_encoded_afresh(tmp_path: Path) -> None:
    path = tmp_path / "n.ipynb"
    path.write_bytes(serialize(new_notebook([new_cell("code", "a = 1", "a")])))
    store = FileStore(tmp_path, lock_dir=tmp_path / ".locks")
    await store.edit(
        "n.ipynb",
        ANYONE,
        lambda nb: edits.plan_set_source(nb, 0, "a = 2"),
        expected_version=None,
        guard_positions=False,
    )
    outside = parse(path.read_bytes())
    outside.cells[0]["source"] = "changed outside"
    path.write_bytes(serialize(outside))
    await store.edit(
        "n.ipynb",
        ANYONE,
        lambda nb: edits.plan_insert(nb, 1, [CellSpec("code", "b = 1")], counter_ids()),
        expected_version=None,
        guard_positions=False,
    )
    assert [c["source"] for c in parse(path.read_bytes()).cells] == ["changed outside", "b = 1"]
    assert path.read_bytes() == serialize(parse(path.read_bytes()))


async def test_an_edit_of_a_large_notebook_encodes_and_hashes_only_its_cell(
    tmp_path: Path,
) -> None:
    """Count the work, not the time: with 5,000 cells, an edit of one cell encodes that cell
    and hashes its bytes only (no other cell, no re-read of the file), and still writes
    nbformat's bytes with the version of those bytes."""
    n = 5000
    cells = [new_cell("code", f"x_{i} = {i}\nprint(x_{i})", f"c{i}") for i in range(n)]
    path = tmp_path / "n.ipynb"
    path.write_bytes(serialize(new_notebook(cells)))
    store = FileStore(tmp_path, lock_dir=tmp_path / ".locks")

    async def edit(at: int, source: str) -> EditOutcome:
        return await store.edit(
            "n.ipynb",
            ANYONE,
            lambda nb: edits.plan_set_source(nb, at, source),
            expected_version=None,
            guard_positions=False,
        )

    await store.load("n.ipynb", ANYONE)
    await edit(0, "first = 1")  # the first save after a read encodes every cell once
    for k, at in enumerate((2500, 17, 2500, n - 2)):
        before = replace(store.work)
        source = f"y = {k}  # edited"
        outcome = await edit(at, source)
        cell = outcome.after.notebook.cells[at]
        body = len(cell_bytes(cell))
        assert store.work.cells_encoded - before.cells_encoded == 1
        assert store.work.bytes_encoded - before.bytes_encoded == body
        assert store.work.bytes_hashed - before.bytes_hashed <= body
        raw = path.read_bytes()
        assert raw == serialize(parse(raw))
        assert outcome.after.version == version_of(raw) != outcome.before.version
        assert parse(raw).cells[at]["source"] == source


async def test_a_same_size_rewrite_right_after_a_save_is_seen(tmp_path: Path) -> None:
    """A stat proves a file unchanged only where no write can keep its key: a rewrite in place,
    same size, a moment after nbrelay's own write (or after a read of someone else's) is seen
    by the next read and refuses an edit planned against the old version."""
    path = tmp_path / "n.ipynb"
    path.write_bytes(serialize(new_notebook([new_cell("code", "a = 1", "a")])))
    store = FileStore(tmp_path, lock_dir=tmp_path / ".locks")
    snap = await store.load(
        "n.ipynb", ANYONE
    )  # someone else's file, read just after it was written

    def rewrite(old: str, new: str) -> None:
        raw = path.read_bytes()
        assert len(old) == len(new)
        assert old.encode() in raw
        with open(path, "r+b") as fh:  # in place: same inode, same size
            fh.write(raw.replace(old.encode(), new.encode()))

    rewrite("a = 1", "a = 2")
    seen = await store.load("n.ipynb", ANYONE)
    assert seen.notebook.cells[0]["source"] == "a = 2"
    assert seen.version != snap.version

    done = await store.edit(
        "n.ipynb",
        ANYONE,
        lambda nb: edits.plan_set_source(nb, 0, "b = 1"),
        expected_version=seen.version,
        guard_positions=False,
    )
    rewrite("b = 1", "b = 9")  # right after nbrelay's own write
    with pytest.raises(ConflictError):
        await store.edit(
            "n.ipynb",
            ANYONE,
            lambda nb: edits.plan_set_source(nb, 0, "c = 1"),
            expected_version=done.after.version,
            guard_positions=False,
        )
    assert parse(path.read_bytes()).cells[0]["source"] == "b = 9"
