"""What an agent reads: outputs as bounded text, images as placeholders, clean tracebacks.

This module shares a result's character budget among its outputs (``Budget``, ``render_many``)
and gives outputs whole (``full_output``); one output as readable text is ``output_text.py``,
whose names are re-exported here.

Everything here is pure: callers pass the limits in. The same functions shape outputs read from a
file and outputs streamed from a kernel, so an agent sees one format everywhere.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nbrelay.notebook.model import Cell
from nbrelay.notebook.output_text import (
    ANSI,
    IMAGE_MIMES,
    PREVIEW_LINES,
    OutputText,
    as_text,
    clean_traceback,
    collapse_cr,
    describe_image,
    html_table_rows,
    html_text,
    html_to_text,
    image_bytes_len,
    json_head,
    json_text,
    mime_sizes,
    output_size,
    output_text,
    source_preview,
    strip_ansi,
    truncate_middle,
    value_size,
)

__all__ = [
    "ANSI",
    "HEAD",
    "IMAGE_MIMES",
    "NOTICE",
    "PREVIEW_LINES",
    "Budget",
    "OutputText",
    "allocate",
    "as_text",
    "clean_traceback",
    "collapse_cr",
    "describe",
    "describe_image",
    "fair_shares",
    "full_output",
    "html_table_rows",
    "html_text",
    "html_to_text",
    "image_bytes_len",
    "json_head",
    "json_text",
    "mime_sizes",
    "output_size",
    "output_text",
    "outputs_summary",
    "render_many",
    "render_outputs",
    "source_preview",
    "strip_ansi",
    "truncate_middle",
    "value_size",
]

T = TypeVar("T")

# Every output of a result shows at least its first HEAD characters (or all of it); a text that
# would lose no more than NOTICE characters is shown whole (a cut marker costs about that much).
HEAD = 120
NOTICE = 60


def allocate(lengths: Sequence[int], total: int, cap: int) -> list[int]:
    """How many characters of each text to show when ``total`` is shared by all of them, each
    at most ``cap``: every text gets its head (``HEAD``; shorter texts whole), then the rest is
    shared by water-filling (short texts get all they need, long ones split what is left
    evenly), and a text that would lose at most ``NOTICE`` characters is shown whole. The heads
    come first, so many outputs can take a little more than ``total``; a total of 0 (no output
    wanted) shows nothing.
    """
    if total <= 0 or cap <= 0:
        return [0] * len(lengths)
    head = min(HEAD, cap)
    shares = [min(n, head) for n in lengths]
    left = total - sum(shares)
    if left > 0:
        wants = [max(min(n, cap) - s, 0) for n, s in zip(lengths, shares, strict=True)]
        extra = fair_shares(wants, left, max(wants, default=0))
        shares = [s + e for s, e in zip(shares, extra, strict=True)]
    return [n if n - s <= NOTICE else s for n, s in zip(lengths, shares, strict=True)]


def fair_shares(lengths: Sequence[int], total: int, cap: int) -> list[int]:
    """Split ``total`` characters among texts of ``lengths`` (each at most ``cap``) by
    water-filling: every text gets the same share unless it needs less."""
    shares = [0] * len(lengths)
    pending = [i for i, n in enumerate(lengths) if n > 0]
    left = max(total, 0)
    while pending and left > 0:
        share = max(left // len(pending), 1)
        still = []
        for i in pending:
            want = min(lengths[i], cap) - shares[i]
            give = min(want, share, left)
            shares[i] += give
            left -= give
            if shares[i] < min(lengths[i], cap):
                still.append(i)
        pending = still
    return shares


@dataclass
class Budget:
    """A character budget shared by every output of one tool call.

    Fair sharing needs to know every text before fitting any: ``plan`` shares the budget among
    the texts a result will show (``allocate``), and the ``take`` calls that follow (in the same
    order) fit each into its share. ``share`` builds a result that way from any function that
    takes its texts one by one. Without a plan, ``take`` fits one text in what is left.
    """

    remaining: int
    per_output: int
    _planned: deque[tuple[int, int]] = field(default_factory=deque, repr=False)
    _recording: list[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._wanted = self.remaining > 0  # a budget of 0 asks for no output text at all

    def plan(self, texts: Sequence[str]) -> None:
        """Share the budget among ``texts``, which the next ``take`` calls fit, in order."""
        lengths = [len(t) for t in texts]
        self._planned.extend(
            zip(lengths, allocate(lengths, self.remaining, self.per_output), strict=True)
        )

    @property
    def window(self) -> int:
        """How much of each end of a huge output a read looks at (``output_text``'s window):
        no output shows more than ``per_output`` characters, and cleaning (ANSI codes,
        progress bars) can make a text shorter."""
        return max(2 * self.per_output, 1)

    def take(
        self, text: str, hint: str, *, unread: int = 0, seam: int = 0
    ) -> tuple[str, int, bool]:
        """Fit ``text`` into the budget: (shown, characters cut, whether anything was shown).
        ``unread`` characters missing at ``seam`` (a windowed read) count as cut."""
        if self._recording is not None:
            self._recording.append(text)
            return text, 0, True
        if self._planned and self._planned[0][0] == len(text):
            limit = self._planned.popleft()[1]
        else:
            self._planned.clear()  # a different text than planned: plan no more
            left = max(self.remaining, 1) if self._wanted else 0  # spent: still its head
            limit = allocate([len(text)], left, self.per_output)[0]
        if limit <= 0 and (text or unread):
            return "", len(text) + unread, False
        shown, cut = truncate_middle(text, limit, hint=hint, unread=unread, seam=seam)
        self.remaining -= len(shown)
        return shown, cut, True

    def take_output(self, shown: OutputText, hint: str) -> tuple[str, int, bool]:
        """``take`` for an output's text (counting what a windowed read left unread)."""
        return self.take(shown.text, hint, unread=shown.unread, seam=shown.seam)

    def take_all(self, texts: Sequence[str], hint: str) -> list[tuple[str, int, bool]]:
        """Fit several texts at once, sharing the budget fairly among them."""
        self.plan(texts)
        return [self.take(t, hint) for t in texts]

    def share(self, build: Callable[[Budget], T]) -> T:
        """``build(self)`` with the budget shared fairly among every text it takes: ``build``
        runs once to learn its texts (``take`` returns them whole), then again for real. It
        must take the same texts in the same order both times, and have no other effect."""
        probe = Budget(self.remaining, self.per_output, _recording=[])
        build(probe)
        self.plan(probe._recording or [])
        return build(self)


def render_outputs(
    cell: Cell,
    budget: Budget,
    *,
    read_hint: str = "read_output",
    image_hint: Callable[[int], str] | None = None,
) -> list[dict[str, Any]]:
    """The outputs of a cell as agent-readable dicts within ``budget``; ``image_hint(k)`` says
    how to get the image of output ``k``."""
    hint = image_hint
    pointer = (lambda _n, k: hint(k)) if hint is not None else None
    return render_many([cell], budget, read_hint=read_hint, image_hint=pointer)[0]


def render_many(
    cells: Sequence[Cell],
    budget: Budget,
    *,
    read_hint: str = "read_output",
    image_hint: Callable[[int, int], str] | None = None,
) -> list[list[dict[str, Any]]]:
    """The outputs of several cells, sharing ``budget`` fairly among all of them (a flood in
    one cell leaves every other output its head); ``image_hint(n, k)`` says how to get the image
    of output ``k`` of ``cells[n]``."""
    per_cell = [
        [
            (k, o, output_text(o, budget.window))
            for k, o in enumerate(c.get("outputs") or [])
            if isinstance(o, dict)
        ]
        for c in cells
    ]
    budget.plan([t.text for outputs in per_cell for _, _, t in outputs])
    hint = f"{read_hint} for the rest"
    rendered: list[list[dict[str, Any]]] = []
    for n, outputs in enumerate(per_cell):
        views: list[dict[str, Any]] = []
        for k, out, ot in outputs:
            shown, cut, any_shown = budget.take_output(ot, hint)
            view: dict[str, Any] = {"output": k, "type": ot.kind}
            if out.get("output_type") == "stream":
                view["name"] = out.get("name", "stdout")
            if ot.image:
                view["image"] = ot.image
            if not any_shown and (ot.text or ot.unread):
                view["text"] = ""
                view["omitted"] = f"{cut:,} characters not shown (output budget 0)"
            else:
                view["text"] = shown
            if ot.image and image_hint is not None:
                view["text"] = f"{view['text']} ({image_hint(n, k)})".lstrip()
            if cut:
                view["cut"] = cut
            describe(view, out, cut=cut)
            views.append(view)
        rendered.append(views)
    return rendered


def describe(view: dict[str, Any], output: dict[str, Any], *, cut: int) -> None:
    """Say what an output holds where its text does not show all of it: a rich output's
    formats with their sizes in characters (``mimes``; unless it is plain text shown whole),
    a cut stream's or error's ``size``."""
    if output.get("output_type") in ("stream", "error"):
        if cut:
            view["size"] = output_size(output)
        return
    sizes = mime_sizes(output)
    if cut or list(sizes) != ["text/plain"]:
        view["mimes"] = sizes


def outputs_summary(cell: Cell, max_chars: int = 120) -> str:
    """A one-line summary of a cell's outputs for overviews."""
    outs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
    if not outs:
        return ""
    first = ""
    for o in outs:
        ot = output_text(o, max(max_chars, 1000))
        text = ot.text.strip()
        if text:
            first = text.splitlines()[0] if ot.kind != "error" else text.splitlines()[-1]
            break
    if len(first) > max_chars:
        first = first[:max_chars] + "…"
    kinds = {str(o.get("output_type")) for o in outs}
    tag = "error" if "error" in kinds else f"{len(outs)} output{'s' if len(outs) != 1 else ''}"
    return f"[{tag}] {first}".rstrip()


_HINT_MIMES: dict[str, tuple[str, ...]] = {
    "image": IMAGE_MIMES,
    "table": ("text/html", "text/markdown", "text/plain"),
    "text": ("text/plain", "text/markdown", "text/latex", "application/json", "text/html"),
}


def full_output(output: dict[str, Any], type_hint: str | None = None) -> tuple[str, Any]:
    """The complete content of one output as (mime type, data), untruncated.

    Streams and errors are text (errors as a clean traceback). For rich outputs ``type_hint``
    ("text", "image" or "table") picks the format; without it an image wins, then HTML, then
    plain text. Image data stays base64, as stored.
    """
    kind = output.get("output_type")
    if kind == "stream":
        return "text/plain", collapse_cr(strip_ansi(as_text(output.get("text", ""))))
    if kind == "error":
        return "text/plain", clean_traceback(output)
    data = output.get("data")
    if not isinstance(data, dict) or not data:
        return "text/plain", ""
    order: tuple[str, ...] = (*IMAGE_MIMES, "text/html", "text/plain")
    if type_hint in _HINT_MIMES:
        order = (*_HINT_MIMES[type_hint], *order)
    for mime in order:
        if mime in data:
            value = data[mime]
            return mime, value if mime == "application/json" else as_text(value)
    mime = next(iter(data))
    return mime, data[mime]
