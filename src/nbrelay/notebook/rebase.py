"""Rebasing a text change onto text others changed since: the agent's edit of a cell's source,
applied to the source as a person has it now, so their concurrent keystrokes survive.

Pure string work (no CRDT types): ``notebook.ydoc`` turns the operations into Y text edits.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TextOp:
    """Replace ``length`` characters at ``at`` (in the current text) by ``insert``."""

    at: int
    length: int
    insert: str


_DIFF_LIMIT = 4_000_000  # above this product of lengths, a changed middle is one replacement


def _opcodes(a: str, b: str) -> list[tuple[str, int, int, int, int]]:
    """Opcodes turning ``a`` into ``b``: common prefix and suffix first, then difflib."""
    n = min(len(a), len(b))
    pre = 0
    while pre < n and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and a[len(a) - 1 - suf] == b[len(b) - 1 - suf]:
        suf += 1
    mid_a, mid_b = a[pre : len(a) - suf], b[pre : len(b) - suf]
    ops: list[tuple[str, int, int, int, int]] = []
    if pre:
        ops.append(("equal", 0, pre, 0, pre))
    if mid_a or mid_b:
        if mid_a and mid_b and len(mid_a) * len(mid_b) <= _DIFF_LIMIT:
            matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                ops.append((tag, i1 + pre, i2 + pre, j1 + pre, j2 + pre))
        else:
            ops.append(("replace", pre, len(a) - suf, pre, len(b) - suf))
    if suf:
        ops.append(("equal", len(a) - suf, len(a), len(b) - suf, len(b)))
    return ops


def rebase_text(base: str, current: str, new: str) -> list[TextOp]:
    """The operations that make the change ``base → new`` on ``current``.

    ``current`` is ``base`` plus what others changed since. Characters of ``base`` that the change
    deletes are deleted where they still are; text others inserted is kept; inserted text goes
    where its neighbour from ``base`` now is. With ``current == base`` this is a plain minimal
    diff. Operations are returned in order of position, not overlapping.
    """
    if base == new:
        return []
    # Where each character of base is now (None if someone deleted it).
    where: list[int | None] = [None] * len(base)
    for tag, i1, i2, j1, _ in _opcodes(base, current):
        if tag == "equal":
            for k in range(i2 - i1):
                where[i1 + k] = j1 + k

    def point(p: int) -> int:
        """Where a position of base (between characters) is now."""
        for k in range(p, len(base)):
            at = where[k]
            if at is not None:
                return at
        return len(current)

    ops: list[TextOp] = []
    for tag, i1, i2, j1, j2 in _opcodes(base, new):
        if tag == "equal":
            continue
        insert = new[j1:j2]
        alive = [w for w in where[i1:i2] if w is not None]
        runs: list[tuple[int, int]] = []
        for w in alive:
            if runs and runs[-1][0] + runs[-1][1] == w:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((w, 1))
        if not runs:
            ops.append(TextOp(point(i1), 0, insert))
            continue
        first, *rest = runs
        ops.append(TextOp(first[0], first[1], insert))
        ops.extend(TextOp(start, length, "") for start, length in rest)
    ops.sort(key=lambda o: o.at)  # stable: at one position, the earlier change comes first
    return ops


def apply_text_ops(text: str, ops: Sequence[TextOp]) -> str:
    """Apply ``rebase_text`` operations to a plain string (what the Y text will hold)."""
    for op in reversed(ops):
        text = text[: op.at] + op.insert + text[op.at + op.length :]
    return text
