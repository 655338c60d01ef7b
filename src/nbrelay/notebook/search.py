"""Search a notebook's cells (and optionally outputs) for a literal string or a regex."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from nbrelay.errors import InvalidArgument
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.render import output_text

_MAX_PATTERN = 1000
_MAX_LINE = 200


@dataclass(frozen=True)
class Match:
    index: int
    id: str
    cell_type: str
    where: str  # "source" or "output"
    line: int  # 0-based line within the source (or output text)
    text: str  # the matching line, cut to 200 characters around the match


def compile_pattern(pattern: str, *, regex: bool, case_sensitive: bool) -> re.Pattern[str]:
    if not pattern:
        raise InvalidArgument("the search pattern is empty.", hint="Give text to look for.")
    if len(pattern) > _MAX_PATTERN:
        raise InvalidArgument(f"the search pattern is over {_MAX_PATTERN} characters.")
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        return re.compile(pattern if regex else re.escape(pattern), flags)
    except re.error as exc:
        raise InvalidArgument(
            f"the regular expression is invalid: {exc}.",
            hint="Fix the pattern, or pass regex=false to search for the literal text.",
        ) from exc


def substitute(
    pat: re.Pattern[str], replacement: str, text: str, *, regex: bool
) -> tuple[str, int]:
    """Replace every match of ``pat`` in ``text``: (new text, count). With ``regex`` the
    replacement may use ``\\1`` and ``\\g<name>``; otherwise it is literal text."""
    try:
        if regex:
            return pat.subn(replacement, text)
        return pat.subn(lambda _: replacement, text)
    except (re.error, IndexError) as exc:
        raise InvalidArgument(
            f"the replacement {replacement!r} is invalid: {exc}.",
            hint="Group references are \\1 or \\g<name>; pass regex=false for literal text.",
        ) from exc


def _clip(line: str, start: int, end: int) -> str:
    if len(line) <= _MAX_LINE:
        return line
    lo = max(start - 60, 0)
    return ("…" if lo else "") + line[lo : lo + _MAX_LINE] + "…"


def _lines(text: str, pat: re.Pattern[str]) -> Iterable[tuple[int, str]]:
    for k, line in enumerate(text.splitlines()):
        m = pat.search(line)
        if m:
            yield k, _clip(line, m.start(), m.end())


def search(
    nb: Notebook,
    pat: re.Pattern[str],
    *,
    cell_types: Iterable[str] = ("code", "markdown", "raw"),
    outputs: bool = False,
) -> list[Match]:
    """Every line that matches, in notebook order."""
    kinds = set(cell_types)
    found: list[Match] = []
    for i, cell in enumerate(nb.cells):
        kind = str(cell.get("cell_type"))
        if kind not in kinds:
            continue
        for k, line in _lines(str(cell.get("source", "")), pat):
            found.append(Match(i, cell["id"], kind, "source", k, line))
        if outputs:
            for out in cell.get("outputs") or []:
                if isinstance(out, dict):
                    for k, line in _lines(output_text(out).text, pat):
                        found.append(Match(i, cell["id"], kind, "output", k, line))
    return found
