"""The text of a run (pure): what each part of a run result becomes."""

from __future__ import annotations

from nbrelay.tools.run_text import TRACEBACK_CHARS, run_text, short_traceback


def test_a_plain_python_traceback_keeps_its_last_lines_and_counts_the_frames_left_out() -> None:
    frames = "".join(
        f'  File "/lib/m{i}.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(80)
    )
    text = f"Traceback (most recent call last):\n{frames}RecursionError: too deep"
    short = short_traceback(text, 'read_output(path="a.ipynb", cell="x", output=0)')
    assert len(short) <= TRACEBACK_CHARS + 120
    assert short.endswith("RecursionError: too deep")
    assert "in f79" in short
    head = short.splitlines()[0]
    left = int(head.split("[… ")[1].split(" ")[0])
    assert left + short.count('  File "') == 80
    assert head.endswith(
        'read_output(path="a.ipynb", cell="x", output=0) shows the whole traceback]'
    )
    assert short_traceback("KeyError: 'a'") == "KeyError: 'a'"


def test_a_run_says_each_cell_once_and_groups_what_did_not_run() -> None:
    data = {
        "path": "a.ipynb",
        "status": "done",
        "kernel": "python3",
        "cells": [
            {
                "index": 0,
                "id": "a",
                "status": "ok",
                "execution_count": 1,
                "seconds": 2.5,
                "outputs": [
                    {"output": 0, "type": "stream", "text": "out\n", "name": "stdout"},
                    {"output": 1, "type": "stream", "text": "warn\n", "name": "stderr"},
                    {
                        "output": 2,
                        "type": "stream",
                        "text": "",
                        "omitted": "9 characters not shown",
                    },
                ],
            },
            {"index": 1, "id": "b", "status": "error", "execution_count": 2},
            {"index": 2, "id": "c", "status": "skipped"},
            {"index": 3, "id": "d", "status": "skipped"},
            {"index": 5, "id": "f", "status": "skipped"},
        ],
        "seconds": 2.6,
        "note": "stopped early: cell 1 ended with error",
    }
    assert run_text(data).splitlines() == [
        "cell 0 (a) [1] ok 2.5 s",
        "out",
        "[stderr] warn",
        "[9 characters not shown]",
        "cell 1 (b) [2] error",
        "cells 2-3 skipped",
        "cell 5 skipped",
        "note: stopped early: cell 1 ended with error",
    ]
