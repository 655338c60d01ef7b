"""Outside changes (plan C): read -> someone else changes the file -> write, 300 random times.

The outside change is one of: an nbformat rewrite, ``git checkout`` of another version, a
same-size edit with the mtime put back, an editor-style atomic replace, truncation to 0 bytes,
invalid JSON, deletion, and a bare ``touch``. The agent's write is one of the edit tools, by index
or by id, with or without ``expected_version``. After each write:

* refused -> the file is exactly what the outside change left (or still absent);
* applied -> only an id-addressed edit without a version may be applied on top of a change, and
  then every cell the outside change left is still there, unchanged (the edited cell too, when
  the outside change touched it), and the result says the notebook (or the cell, merged) had
  changed since the agent's read; a ``touch``
  must never be refused (no false conflicts).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.notebook.model import parse
from nbrelay.server import build_server
from tests.helpers import text_of
from tests.http.harness import report, size

pytestmark = pytest.mark.anyio

ROUNDS = size(300, 1000)
NB = "c.ipynb"
CHANGES = (
    "rewrite",
    "git-checkout",
    "same-size-mtime-restored",
    "atomic-replace",
    "truncate",
    "invalid-json",
    "delete",
    "touch",
)
WRITES = (
    "edit-index-version",
    "edit-index",
    "edit-id",
    "edit-id-version",
    "insert-top",
    "delete-id-version",
    "append-id",
)


GIT = shutil.which("git") or "git"


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        [GIT, "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


def make_notebook(rng: random.Random, tag: str) -> bytes:
    nb = nbformat.v4.new_notebook()
    for i in range(rng.randint(3, 7)):
        source = f"{tag} cell {i} " + "".join(rng.choice("abcdef") for _ in range(12))
        cell = nbformat.v4.new_code_cell(source)
        cell.id = f"{tag}-{i}"
        nb.cells.append(cell)
    return str(nbformat.writes(nb)).encode() + b"\n"


@pytest.fixture
async def client(root: Path, tmp_path: Path) -> AsyncIterator[Client]:
    settings = Settings(root=root, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings), mode="legacy") as c:
        yield c


def outside_change(kind: str, path: Path, rng: random.Random, other: bytes) -> None:
    raw = path.read_bytes()
    if kind == "rewrite":
        nb = nbformat.reads(raw.decode(), as_version=4)
        nb.cells[rng.randrange(len(nb.cells))].source += "\n# changed outside"
        nb.cells.insert(0, nbformat.v4.new_markdown_cell("# added outside"))
        nb.cells[0].id = "outside"
        nbformat.write(nb, str(path))  # noqa: TID251 - this is the outside writer
    elif kind == "git-checkout":
        git(path.parent, "checkout", "other", "--", path.name)
    elif kind == "same-size-mtime-restored":
        st = os.stat(path)
        i = raw.index(b" cell ") + len(b" cell 0 ")
        flipped = raw[:i] + (b"X" if raw[i : i + 1] != b"X" else b"Y") + raw[i + 1 :]
        path.write_bytes(flipped)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(path).st_size == st.st_size
    elif kind == "atomic-replace":
        tmp = path.with_name(".editor-swap")
        tmp.write_bytes(raw.replace(b" cell 1 ", b" CELL 1 "))
        os.replace(tmp, path)
    elif kind == "truncate":
        path.write_bytes(b"")
    elif kind == "invalid-json":
        path.write_bytes(raw[: len(raw) // 2])
    elif kind == "delete":
        path.unlink()
    else:
        later = time.time() + rng.randint(1, 100)
        os.utime(path, (later, later))


def write_call(kind: str, view: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
    cells = view["cells"]
    i = rng.randrange(len(cells))
    cid = cells[i]["id"]
    version = {"expected_version": view["version"]}
    text = f"agent {rng.random()}"
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "edit-index-version": ("edit_cell", {"cell": i, "source": text, **version}),
        "edit-index": ("edit_cell", {"cell": i, "source": text}),
        "edit-id": ("edit_cell", {"cell": cid, "source": text}),
        "edit-id-version": ("edit_cell", {"cell": cid, "source": text, **version}),
        "insert-top": ("insert_cells", {"index": 0, "cells": [text]}),
        "delete-id-version": ("delete_cells", {"cells": [cid], **version}),
        "append-id": ("insert_cells", {"after": cid, "cells": [text]}),
    }
    return calls[kind]


async def test_outside_changes_are_never_silently_overwritten(
    client: Client, root: Path, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(1234)
    path = root / NB
    git(root, "init", "-q")
    other = make_notebook(rng, "other")
    path.write_bytes(other)
    git(root, "add", NB)
    git(root, "commit", "-q", "-m", "other")
    git(root, "tag", "other")
    tally: Counter[str] = Counter()
    for round_ in range(ROUNDS):
        change = CHANGES[round_ % len(CHANGES)]
        write = rng.choice(WRITES)
        original = make_notebook(rng, f"r{round_}")
        path.write_bytes(original)
        view_result = await client.call_tool("read_notebook", {"path": NB})
        assert not view_result.is_error, text_of(view_result)
        view = view_result.structured_content
        assert isinstance(view, dict)
        outside_change(change, path, rng, other)
        after_change = path.read_bytes() if path.exists() else None
        tool, args = write_call(write, view, rng)
        result = await client.call_tool(tool, {"path": NB, **args})
        now = path.read_bytes() if path.exists() else None
        where = f"round {round_}: {change} then {write}"
        if change == "touch":
            assert not result.is_error, f"false conflict on a touch, {where}: {text_of(result)}"
            tally["touch applied"] += 1
            continue
        if result.is_error:
            assert now == after_change, f"a refused write changed the file, {where}"
            message = text_of(result)
            if change == "delete":
                assert "does not exist" in message
            elif change in ("truncate", "invalid-json"):
                assert "not valid JSON" in message, message
                assert "line" in message, message
            elif write.endswith("version") or write in ("edit-index", "insert-top"):
                assert NB in message, message
                assert "Read the notebook again" in message, message
            tally["refused"] += 1
            continue
        # Applied on top of the outside change: only an id edit without a version may be.
        assert write in ("edit-id", "append-id"), f"guard missed a change, {where}"
        assert after_change is not None
        assert now is not None
        before_cells = {c["id"]: c["source"] for c in parse(after_change).cells}
        final = {c["id"]: c["source"] for c in parse(now).cells}
        target = args["cell"] if write == "edit-id" else None
        read = {c["id"]: c["source"] for c in view["cells"]}
        if target is not None and before_cells.get(target) != read.get(target):
            target = None  # changed since the read: merged with that change or refused, never lost
        kept = {k: v for k, v in before_cells.items() if k != target}
        lost = {k for k in kept if final.get(k) != kept[k]}
        assert not lost, f"silent overwrite of {sorted(lost)}, {where}"
        assert "changed since you last read it" in text_of(result), where
        tally["applied on top"] += 1
    assert tally["refused"] + tally["applied on top"] + tally["touch applied"] == ROUNDS
    report(
        request,
        f"C1: {ROUNDS} read -> outside change -> write interleavings: 0 silent overwrites, "
        f"0 false conflicts on {tally['touch applied']} touches; {tally['refused']} writes "
        f"refused with the file left as the outside change made it, {tally['applied on top']} "
        "id-addressed edits applied on top with every outside change kept.",
    )


async def test_a_notebook_deleted_outside_is_not_recreated_by_an_edit(
    client: Client, root: Path
) -> None:
    (root / NB).write_bytes(make_notebook(random.Random(1), "d"))
    view = await client.call_tool("read_notebook", {"path": NB})
    assert not view.is_error
    (root / NB).unlink()
    edits: list[tuple[str, dict[str, Any]]] = [
        ("edit_cell", {"cell": "d-0", "source": "x"}),
        ("insert_cells", {"cells": ["x"]}),
        ("clear_outputs", {}),
        ("delete_cells", {"cells": ["d-1"]}),
    ]
    for tool, args in edits:
        result = await client.call_tool(tool, {"path": NB, **args})
        assert result.is_error
        assert "does not exist" in text_of(result)
        assert not (root / NB).exists()
