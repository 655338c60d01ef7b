"""Three-way merge of a cell's source, line by line (the diff3 rule git uses).

``merge3(base, ours, theirs)`` merges two edits of the same text: ``ours`` (what the agent wrote,
starting from ``base``, the source it last read) and ``theirs`` (the source now, after someone
else's change). Regions changed on one side only take that side; regions changed identically on
both take either; regions changed differently on both sides are conflicts. Two changes must be
separated by at least one line neither side changed, as in git.

(merge3 on PyPI does the same, but is GPL-licensed; this is the same algorithm on difflib.)
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Merged:
    """The result of a merge: ``text`` when clean, else the conflicting regions."""

    text: str | None
    conflicts: tuple[Conflict, ...] = ()

    @property
    def clean(self) -> bool:
        return self.text is not None


@dataclass(frozen=True)
class Conflict:
    """Lines both sides changed differently (0-based line numbers in ``base``)."""

    base_start: int
    base_end: int
    ours: str
    theirs: str


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _sync_regions(
    base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]
) -> list[tuple[int, int, int, int]]:
    """Stretches of ``base`` unchanged on both sides: (base start, base end, ours start, theirs
    start), ending with an empty sentinel at the end of all three."""
    a_blocks = difflib.SequenceMatcher(None, base, ours, autojunk=False).get_matching_blocks()
    b_blocks = difflib.SequenceMatcher(None, base, theirs, autojunk=False).get_matching_blocks()
    regions: list[tuple[int, int, int, int]] = []
    ia = ib = 0
    while ia < len(a_blocks) and ib < len(b_blocks):
        a_base, a_match, a_len = a_blocks[ia]
        b_base, b_match, b_len = b_blocks[ib]
        start, end = max(a_base, b_base), min(a_base + a_len, b_base + b_len)
        if start < end:
            regions.append((start, end, a_match + start - a_base, b_match + start - b_base))
        if a_base + a_len < b_base + b_len:
            ia += 1
        else:
            ib += 1
    regions.append((len(base), len(base), len(ours), len(theirs)))
    return regions


def merge3(base: str, ours: str, theirs: str) -> Merged:
    """Merge ``ours`` and ``theirs``, two edits of ``base``; see the module docstring.

    Two separate changes add up: the merge is as much longer than ``theirs`` as ``ours`` is
    than ``base``. Where repeated lines make the alignment ambiguous and that does not hold,
    the result is a conflict: a merge is never a guess.
    """
    if ours == theirs or theirs == base:
        return Merged(ours)
    if ours == base:
        return Merged(theirs)
    merged = _merge(base, ours, theirs)
    if merged.text is not None and len(merged.text) != len(ours) + len(theirs) - len(base):
        return Merged(None, (Conflict(0, len(base.splitlines()), ours, theirs),))
    return merged


def _merge(base: str, ours: str, theirs: str) -> Merged:
    # Each text gets a final newline for the merge (and loses it after), so a line added at the
    # end of a source without one does not count as a change of its last line.
    b, o, t = _lines(base + "\n"), _lines(ours + "\n"), _lines(theirs + "\n")
    out: list[str] = []
    conflicts: list[Conflict] = []
    bz = oz = tz = 0
    for b_start, b_end, o_start, t_start in _sync_regions(b, o, t):
        base_part, ours_part, theirs_part = b[bz:b_start], o[oz:o_start], t[tz:t_start]
        if ours_part == theirs_part or theirs_part == base_part:
            out.extend(ours_part)
        elif ours_part == base_part:
            out.extend(theirs_part)
        else:
            conflicts.append(Conflict(bz, b_start, "".join(ours_part), "".join(theirs_part)))
        length = b_end - b_start
        out.extend(b[b_start:b_end])
        bz, oz, tz = b_end, o_start + length, t_start + length
    if conflicts:
        return Merged(None, tuple(conflicts))
    return Merged("".join(out)[:-1])
