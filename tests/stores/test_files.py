"""The file store on real files: confinement, atomic writes, conflicts, locks, crashes."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from nbrelay.caller import ANYONE
from nbrelay.errors import (
    ConflictError,
    NotebookExists,
    NotebookInvalid,
    NotebookNotFound,
    PathError,
)
from nbrelay.notebook import edits
from nbrelay.notebook.edits import CellSpec, Plan
from nbrelay.notebook.model import parse
from nbrelay.stores.files import FileStore
from tests.helpers import counter_ids, notebook, write_notebook

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(root: Path, tmp_path: Path) -> FileStore:
    return FileStore(root, lock_dir=tmp_path / "locks")


def setter(i: int, text: str):  # type: ignore[no-untyped-def]
    return lambda nb: edits.plan_set_source(nb, i, text)


def inserter(text: str):  # type: ignore[no-untyped-def]
    ids = counter_ids(f"x{time.monotonic_ns()}")
    return lambda nb: edits.plan_insert(nb, len(nb.cells), [CellSpec("code", text)], ids)


async def test_reading_never_modifies_the_file(store: FileStore, root: Path) -> None:
    raw = json.dumps(
        {
            "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["a\n", "b"]}],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 4,
        }
    ).encode()
    (root / "old.ipynb").write_bytes(raw)
    before = os.stat(root / "old.ipynb")
    snap = await store.load("old.ipynb", ANYONE)
    assert snap.notebook.cells[0]["source"] == "a\nb"
    assert (root / "old.ipynb").read_bytes() == raw
    assert os.stat(root / "old.ipynb").st_mtime_ns == before.st_mtime_ns


async def test_edit_writes_the_new_notebook_and_keeps_the_mode(
    store: FileStore, root: Path
) -> None:
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    os.chmod(root / "a.ipynb", 0o640)
    outcome = await store.edit(
        "a.ipynb", ANYONE, setter(0, "x = 2"), expected_version=None, guard_positions=True
    )
    assert parse((root / "a.ipynb").read_bytes()).cells[0]["source"] == "x = 2"
    assert stat.S_IMODE(os.stat(root / "a.ipynb").st_mode) == 0o640
    assert outcome.after.version != outcome.before.version
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


async def test_stale_expected_version_is_refused_with_the_current_one(
    store: FileStore, root: Path
) -> None:
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    v1 = (await store.load("a.ipynb", ANYONE)).version
    v2 = (
        await store.edit(
            "a.ipynb", ANYONE, setter(0, "y"), expected_version=v1, guard_positions=True
        )
    ).after.version
    raw = (root / "a.ipynb").read_bytes()
    with pytest.raises(ConflictError) as info:
        await store.edit(
            "a.ipynb", ANYONE, setter(0, "z"), expected_version=v1, guard_positions=True
        )
    assert info.value.current == v2
    assert (root / "a.ipynb").read_bytes() == raw


async def test_outside_change_refuses_positional_edits_but_applies_id_edits_on_top(
    store: FileStore, root: Path
) -> None:
    write_notebook(root / "a.ipynb", notebook("a", "b"))
    await store.load("a.ipynb", ANYONE)
    write_notebook(root / "a.ipynb", notebook("NEW", "a", "b"))  # someone inserts at the top
    with pytest.raises(ConflictError) as info:
        await store.edit(
            "a.ipynb", ANYONE, setter(0, "z"), expected_version=None, guard_positions=True
        )
    assert "changed by someone else since you last read it" in info.value.message
    outcome = await store.edit(
        "a.ipynb", ANYONE, inserter("mine"), expected_version=None, guard_positions=False
    )
    assert outcome.changed_outside
    assert [c["source"] for c in parse((root / "a.ipynb").read_bytes()).cells] == [
        "NEW",
        "a",
        "b",
        "mine",
    ]


async def test_a_touch_is_not_a_conflict(store: FileStore, root: Path) -> None:
    write_notebook(root / "a.ipynb", notebook("a"))
    v = (await store.load("a.ipynb", ANYONE)).version
    os.utime(root / "a.ipynb", (time.time() + 5, time.time() + 5))
    outcome = await store.edit(
        "a.ipynb", ANYONE, setter(0, "b"), expected_version=v, guard_positions=True
    )
    assert not outcome.changed_outside


async def test_same_size_change_with_mtime_restored_is_still_detected(
    store: FileStore, root: Path
) -> None:
    path = root / "a.ipynb"
    write_notebook(path, notebook("aaaa"))
    v = (await store.load("a.ipynb", ANYONE)).version
    st = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"aaaa", b"bbbb"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (await store.load("a.ipynb", ANYONE)).notebook.cells[0]["source"] == "bbbb"
    with pytest.raises(ConflictError):
        await store.edit(
            "a.ipynb", ANYONE, setter(0, "c"), expected_version=v, guard_positions=True
        )


async def test_invalid_files_are_reported_and_never_written(store: FileStore, root: Path) -> None:
    (root / "bad.ipynb").write_bytes(b'{"cells": [')
    with pytest.raises(NotebookInvalid) as info:
        await store.load("bad.ipynb", ANYONE)
    assert "line 1, column 12" in info.value.message
    nb = notebook("a")
    nb.cells[0]["outputs"] = "nope"  # a field nbrelay cannot read: refused with its name
    write_notebook(root / "shape.ipynb", nb)
    with pytest.raises(NotebookInvalid, match="cell 0 \\(id 'c0'\\)'s outputs are a string"):
        await store.load("shape.ipynb", ANYONE)
    nb = notebook("a")
    nb.cells[0]["unknown"] = 1  # readable, but not valid nbformat: reported, never written
    write_notebook(root / "schema.ipynb", nb)
    raw = (root / "schema.ipynb").read_bytes()
    snap = await store.load("schema.ipynb", ANYONE)
    assert snap.problems
    with pytest.raises(NotebookInvalid):
        await store.edit(
            "schema.ipynb", ANYONE, inserter("x"), expected_version=None, guard_positions=False
        )
    assert (root / "schema.ipynb").read_bytes() == raw


async def test_create_refuses_to_overwrite_unless_asked(store: FileStore, root: Path) -> None:
    await store.create("sub/dir/n.ipynb", ANYONE, notebook("a"), overwrite=False)
    with pytest.raises(NotebookExists):
        await store.create("sub/dir/n.ipynb", ANYONE, notebook("b"), overwrite=False)
    await store.create("sub/dir/n.ipynb", ANYONE, notebook("b"), overwrite=True)
    assert parse((root / "sub/dir/n.ipynb").read_bytes()).cells[0]["source"] == "b"
    new_mode = stat.S_IMODE(os.stat(root / "sub/dir/n.ipynb").st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert new_mode == 0o666 & ~umask


async def test_missing_notebooks_say_how_to_find_them(store: FileStore) -> None:
    with pytest.raises(NotebookNotFound) as info:
        await store.load("nope.ipynb", ANYONE)
    assert "list_notebooks" in info.value.hint


ATTACKS = [
    "../x.ipynb",
    "a/../../x.ipynb",
    "/etc/passwd",
    "~/.ssh/id_rsa",
    "file:///etc/passwd",
    "..\\..\\x.ipynb",
    "C:\\x.ipynb",
    "\\\\srv\\share\\x.ipynb",
    "a\x00.ipynb",
    "a" * 5000 + ".ipynb",
    ".env",
    ".git/config",
    "sub/.hidden.ipynb",
    "",
    "   ",
    "notes.txt",
]


@pytest.mark.parametrize("path", ATTACKS)
async def test_paths_that_escape_or_hide_are_refused(store: FileStore, path: str) -> None:
    with pytest.raises(PathError):
        await store.load(path, ANYONE)


async def test_symlinks_out_of_root_and_sibling_prefix_roots_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "r"
    evil = tmp_path / "r-evil"
    root.mkdir()
    evil.mkdir()
    write_notebook(evil / "secret.ipynb", notebook("secret"))
    os.symlink(evil / "secret.ipynb", root / "link.ipynb")
    os.symlink(evil, root / "dirlink")
    store = FileStore(root, lock_dir=tmp_path / "locks")
    for path in ("link.ipynb", "dirlink/secret.ipynb", str(evil / "secret.ipynb")):
        with pytest.raises(PathError):
            await store.load(path, ANYONE)
    assert [e.path for e in await store.list("", ANYONE, recursive=True)] == []


async def test_a_symlink_inside_root_is_followed_and_kept(store: FileStore, root: Path) -> None:
    write_notebook(root / "real.ipynb", notebook("a"))
    os.symlink(root / "real.ipynb", root / "alias.ipynb")
    await store.edit(
        "alias.ipynb", ANYONE, setter(0, "b"), expected_version=None, guard_positions=True
    )
    assert os.path.islink(root / "alias.ipynb")
    assert parse((root / "real.ipynb").read_bytes()).cells[0]["source"] == "b"


async def test_fifos_are_refused_without_blocking(store: FileStore, root: Path) -> None:
    os.mkfifo(root / "pipe.ipynb")
    with pytest.raises(PathError) as info:
        await store.load("pipe.ipynb", ANYONE)
    assert "not a regular file" in info.value.message


async def test_listing_is_recursive_sorted_and_skips_hidden(store: FileStore, root: Path) -> None:
    for rel in ("b.ipynb", "a/x.ipynb", ".hid/y.ipynb", "a/.z.ipynb", "c.txt"):
        write_notebook(root / rel, notebook("a")) if rel.endswith(".ipynb") else (
            root / rel
        ).write_text("x")
    assert [e.path for e in await store.list("", ANYONE, recursive=True)] == [
        "b.ipynb",
        "a/x.ipynb",
    ]
    assert [e.path for e in await store.list("", ANYONE, recursive=False)] == ["b.ipynb"]


WRITER = r"""
import sys, anyio
from pathlib import Path
from nbrelay.notebook import edits
from nbrelay.caller import ANYONE
from nbrelay.notebook.edits import CellSpec
from nbrelay.stores.files import FileStore

async def main(root, lock_dir, tag, count):
    store = FileStore(Path(root), lock_dir=Path(lock_dir))
    n = 0
    def ids():
        return f"{tag}-{n}"
    for n in range(int(count)):
        plan = lambda nb: edits.plan_insert(nb, len(nb.cells), [CellSpec("code", f"{tag} {n}")], ids)
        await store.edit("shared.ipynb", ANYONE, plan, expected_version=None, guard_positions=False)
    print("done", flush=True)

anyio.run(main, *sys.argv[1:])
"""


def test_two_processes_never_lose_each_others_edits(root: Path, tmp_path: Path) -> None:
    write_notebook(root / "shared.ipynb", notebook())
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(root), str(tmp_path / "locks"), tag, "40"],
            stdout=subprocess.PIPE,
        )
        for tag in ("p", "q")
    ]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        assert out.strip() == b"done"
    cells = parse((root / "shared.ipynb").read_bytes()).cells
    assert sorted(c["source"] for c in cells) == sorted(f"{t} {n}" for t in "pq" for n in range(40))


LOOP = r"""
import sys, anyio
from pathlib import Path
from nbrelay.notebook import edits
from nbrelay.caller import ANYONE
from nbrelay.stores.files import FileStore

async def main(root, lock_dir):
    store = FileStore(Path(root), lock_dir=Path(lock_dir))
    print("ready", flush=True)
    k = 0
    while True:
        k += 1
        plan = lambda nb: edits.plan_set_source(nb, 0, f"iteration {k}\n" + "x" * 200_000)
        await store.edit("big.ipynb", ANYONE, plan, expected_version=None, guard_positions=False)

anyio.run(main, *sys.argv[1:])
"""


def test_kill_9_during_writes_always_leaves_the_old_or_new_notebook(
    root: Path, tmp_path: Path
) -> None:
    big = notebook("iteration 0\n", *[f"cell {i}\n" + "y" * 2000 for i in range(300)])
    write_notebook(root / "big.ipynb", big)
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    import random

    rng = random.Random(7)
    for _ in range(12):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(root), str(tmp_path / "locks")],
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
        nb = parse((root / "big.ipynb").read_bytes())
        assert nb.cells[0]["source"].startswith("iteration ")
        assert len(nb.cells) == 301
    store = FileStore(root, lock_dir=tmp_path / "locks")
    anyio.run(lambda: store.list("", ANYONE, recursive=True))
    assert [p.name for p in root.iterdir()] == ["big.ipynb"]


async def test_empty_plans_do_not_write(store: FileStore, root: Path) -> None:
    write_notebook(root / "a.ipynb", notebook("a"))
    before = os.stat(root / "a.ipynb").st_mtime_ns
    outcome = await store.edit(
        "a.ipynb",
        ANYONE,
        lambda nb: Plan(edits=(), touched=()),
        expected_version=None,
        guard_positions=True,
    )
    assert outcome.after.version == outcome.before.version
    assert os.stat(root / "a.ipynb").st_mtime_ns == before
