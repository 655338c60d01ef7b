"""Zero lost work under adversity, briefly: the adversarial run (``tests.reliability.adversarial``)
for a few fixed seeds and rounds in each mode. ``bench/adversarial.py`` runs it for longer.

Agents (MCP sessions and a sessionless client) and people (pycrdt clients in the rooms; in file
mode a writer rewriting the files from outside) on the same notebooks, the server stopped with
SIGTERM or killed with SIGKILL and restarted, files rewritten from outside: every count of lost
work is 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.http.harness import report, size
from tests.reliability.adversarial import Run

pytestmark = pytest.mark.anyio

CASES = [("file", 11), ("live", 21), ("extension", 31)]


@pytest.mark.parametrize(("mode", "seed"), CASES, ids=[f"{m}-{s}" for m, s in CASES])
async def test_no_work_is_lost_silently(
    mode: str, seed: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run = Run(mode, seed, tmp_path, ops=size(3, 8))
    # Every kind of fault once: SIGTERM and kill -9 (and in live and extension mode a reload).
    figures = await run.run(size(2 if mode == "file" else 3, 20))
    report(request, figures.line())
    assert figures.acknowledged
    assert figures.keystrokes
    assert sum(figures.faults.values()) == figures.rounds
    assert figures.counts() == dict.fromkeys(figures.counts(), 0), "\n".join(figures.details)


def test_the_count_finds_each_kind_of_lost_work(tmp_path: Path) -> None:
    """The count itself, on files made by hand: each kind of loss is found and counted once."""
    import nbformat

    from tests.reliability.adversarial import Edit, Keystroke, Rewrite

    run = Run("file", 0, tmp_path, notebooks=2)
    run.root.mkdir()

    def write(nb: int, *sources: str) -> None:
        book = nbformat.v4.new_notebook()
        book.cells = [nbformat.v4.new_code_cell(s) for s in sources]
        run.file(nb).write_text(nbformat.writes(book), encoding="utf-8")

    ledger = run.ledger
    # Agent 0's cell: inserted, edited (both acknowledged); the file has the first version.
    ledger.edits += [
        Edit(0, 0, "insert", "C0b0n1", "A0.1@C0b0n1;", 0.0, acked=1.0, cell_id="x1"),
        Edit(0, 0, "edit", "C0b0n1", "A0.2@C0b0n1;", 0.5, acked=2.0),
        # Inserted twice over (one cell, two copies), and one in the other notebook.
        Edit(0, 0, "insert", "C0b0n3", "A0.3@C0b0n3;", 0.0, acked=1.0, cell_id="x3"),
        Edit(0, 0, "insert", "C0b0n4", "A0.4@C0b0n4;", 0.0, acked=1.0, cell_id="x4"),
        # Deleted (acknowledged) yet still there.
        Edit(0, 1, "insert", "C0b1n5", "A0.5@C0b1n5;", 0.0, acked=1.0, cell_id="x5"),
        Edit(0, 1, "delete", "C0b1n5", "", 0.5, acked=2.0),
        # A stale shared edit that removed a keystroke is counted by the run as it happens.
    ]
    ledger.keystrokes["K1.6@P1b0n7;"] = Keystroke("K1.6@P1b0n7;", "P1b0n7", 0, 1.0)
    ledger.keystrokes["K1.8@P1b0n7;"] = Keystroke("K1.8@P1b0n7;", "P1b0n7", 0, 1.0)
    ledger.outside_cells["O9b1"] = 0.1
    ledger.rewrites.append(Rewrite(1, 0.0, 0.1, set(), "O9b1"))
    write(
        0,
        "Sb0|",
        "A0.1@C0b0n1;",
        "A0.3@C0b0n3;",
        "A0.3@C0b0n3;",
        "P1b0n7|K1.6@P1b0n7;A0.4@C0b0n4;",
    )
    write(1, "Sb1|", "A0.5@C0b1n5;")
    run.problems(final=True)
    f = run.figures
    # C0b0n1 (old version), C0b1n5 (deletion lost); C0b0n4 sits in a person's cell.
    assert f.lost_edits == 3, f.details
    assert f.duplicated_cells == 2, f.details  # the cell twice, so its token twice
    assert f.wrong_cell == 1, f.details
    assert f.lost_keystrokes == 1, f.details  # K1.8
    assert f.silent_overwrites == 1, f.details  # O9b1 vanished
    assert f.wrong_notebook == 0
    write(1, "Sb1|", "O0.9@O9b1;", "A0.2@C0b0n1;")
    run.figures = type(f)("file", 0)
    run.problems(final=True)
    assert run.figures.wrong_notebook == 1, run.figures.details
