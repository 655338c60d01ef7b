"""Search a notebook's cells (and optionally outputs) for a literal string or a regex.

Every pattern a tool takes (search, find and replace, in every profile) is compiled here, with
the ``regex`` package in its ``re``-compatible mode rather than with ``re``: a pattern that
backtracks catastrophically, such as ``(a|aa)+$`` on a long line, is stopped once one call's
matches have spent ``REGEX_TIME_LIMIT`` seconds and refused with an error, and the engine
releases the GIL while it matches, so callers that run the matching on a worker thread keep the
event loop (every other session) responsive. Python's ``re`` has no time limit and holds the GIL
for a whole match: one such search froze the server for minutes. RE2 never backtracks, but it
refuses lookarounds and backreferences, which agents use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nbrelay.errors import InvalidArgument
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.render import output_text

_MAX_PATTERN = 1000
_MAX_LINE = 200
REGEX_TIME_LIMIT = 2.0  # seconds of matching one call may spend in all


def _regex() -> Any:
    """The ``regex`` module, imported on the first search (not to list a server's tools)."""
    import regex

    return regex


@dataclass(frozen=True)
class Match:
    index: int
    id: str
    cell_type: str
    where: str  # "source" or "output"
    line: int  # 0-based line within the source (or output text)
    text: str  # the matching line, cut to 200 characters around the match


class Pattern:
    """A compiled pattern whose matches share one time budget (see the module docstring).

    ``restart()`` starts a new budget; ``search`` and ``subn`` raise ``InvalidArgument`` once it
    is spent.
    """

    def __init__(self, compiled: Any, source: str, *, regex: bool, time_limit: float) -> None:
        self._compiled = compiled
        self.source = source
        self.regex = regex
        self.time_limit = time_limit
        self._deadline = time.monotonic() + time_limit

    def restart(self) -> Pattern:
        self._deadline = time.monotonic() + self.time_limit
        return self

    def _left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise self._too_slow()
        return left

    def _too_slow(self) -> InvalidArgument:
        what = "regular expression" if self.regex else "search"
        return InvalidArgument(
            f"the {what} {self.source[:100]!r} took over {self.time_limit:g} s on this notebook "
            "and was stopped; nothing was changed.",
            hint="Such a pattern backtracks catastrophically (nested repeats like (a+)+ or "
            "(a|aa)+ before something that fails): simplify or anchor it, or pass regex=false "
            "to look for literal text.",
        )

    def search(self, text: str) -> Any:
        try:
            return self._compiled.search(text, timeout=self._left(), concurrent=True)
        except TimeoutError:
            raise self._too_slow() from None

    def subn(self, repl: str | Callable[[Any], str], text: str) -> tuple[str, int]:
        try:
            new, count = self._compiled.subn(repl, text, timeout=self._left(), concurrent=True)
        except TimeoutError:
            raise self._too_slow() from None
        return str(new), int(count)


def compile_pattern(
    pattern: str, *, regex: bool, case_sensitive: bool, time_limit: float = REGEX_TIME_LIMIT
) -> Pattern:
    if not pattern:
        raise InvalidArgument("the search pattern is empty.", hint="Give text to look for.")
    if len(pattern) > _MAX_PATTERN:
        raise InvalidArgument(f"the search pattern is over {_MAX_PATTERN} characters.")
    re_ = _regex()
    flags = re_.VERSION0 | (0 if case_sensitive else re_.IGNORECASE)
    try:
        compiled = re_.compile(pattern if regex else re_.escape(pattern), flags)
    except (re_.error, ValueError, OverflowError, RecursionError) as exc:
        raise InvalidArgument(
            f"the regular expression is invalid: {exc}.",
            hint="Fix the pattern, or pass regex=false to search for the literal text.",
        ) from exc
    return Pattern(compiled, pattern, regex=regex, time_limit=time_limit)


def substitute(pat: Pattern, replacement: str, text: str, *, regex: bool) -> tuple[str, int]:
    """Replace every match of ``pat`` in ``text``: (new text, count). With ``regex`` the
    replacement may use ``\\1`` and ``\\g<name>``; otherwise it is literal text."""
    try:
        if regex:
            return pat.subn(replacement, text)
        return pat.subn(lambda _: replacement, text)
    except (_regex().error, IndexError) as exc:  # a bad replacement template
        raise InvalidArgument(
            f"the replacement {replacement!r} is invalid: {exc}.",
            hint="Group references are \\1 or \\g<name>; pass regex=false for literal text.",
        ) from exc


def _clip(line: str, start: int, end: int) -> str:
    if len(line) <= _MAX_LINE:
        return line
    lo = max(start - 60, 0)
    return ("…" if lo else "") + line[lo : lo + _MAX_LINE] + "…"


def _lines(text: str, pat: Pattern) -> Iterable[tuple[int, str]]:
    for k, line in enumerate(text.splitlines()):
        m = pat.search(line)
        if m:
            yield k, _clip(line, m.start(), m.end())


def search(
    nb: Notebook,
    pat: Pattern,
    *,
    cell_types: Iterable[str] = ("code", "markdown", "raw"),
    outputs: bool = False,
) -> list[Match]:
    """Every line that matches, in notebook order, within the pattern's time budget (restarted
    here). Blocking: call it on a worker thread."""
    pat.restart()
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
