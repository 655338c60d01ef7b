"""What an agent reads: outputs as bounded text, images as placeholders, clean tracebacks.

Everything here is pure: callers pass the limits in. The same functions shape outputs read from a
file and outputs streamed from a kernel, so an agent sees one format everywhere.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, TypeVar

from nbrelay.notebook.model import Cell

T = TypeVar("T")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml")
_TEXT_PREFERENCE = ("text/markdown", "text/latex", "application/json")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def collapse_cr(text: str) -> str:
    """Keep what a terminal would show: text after the last carriage return on each line, and
    backspaces applied."""
    if "\r" not in text and "\b" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    out = []
    for line in lines:
        if "\r" in line:
            parts = list(line.split("\r"))
            line = parts[-1] or next((p for p in reversed(parts) if p), "")
        while "\b" in line:
            i = line.index("\b")
            line = line[: max(i - 1, 0)] + line[i + 1 :]
        out.append(line)
    return "\n".join(out)


def _marker(cut: int, hint: str) -> str:
    return f"\n… [{cut:,} characters cut{'; ' + hint if hint else ''}] …\n"


def truncate_middle(text: str, limit: int, *, hint: str = "") -> tuple[str, int]:
    """Keep the head and tail of ``text`` within ``limit`` characters; return (text, cut).

    The marker says how much was cut and, when given, how to read the rest. A text that would
    lose no more than the marker costs is returned whole: a notice never costs more than the
    text it hides.
    """
    if limit <= 0:
        return "", len(text)
    if len(text) <= limit or len(text) - limit <= len(_marker(len(text) - limit, hint)):
        return text, 0
    head_n = max(limit * 2 // 3, 1)
    tail_n = max(limit - head_n, 0)
    cut = len(text) - head_n - tail_n
    head = text[:head_n]
    tail = text[len(text) - tail_n :] if tail_n else ""
    return head + _marker(cut, hint) + tail, cut


def _image_size(mime: str, data: str) -> tuple[int, int] | None:
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4), validate=False)
    except (binascii.Error, ValueError):
        return None
    if mime == "image/png" and head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if mime == "image/gif" and head[:3] == b"GIF" and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    return None


def image_bytes_len(data: str) -> int:
    return len(data) * 3 // 4


class _HTMLText(HTMLParser):
    """HTML to readable text: table rows as ' | '-separated cells, blocks on their own lines."""

    _BLOCK = frozenset({"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "pre", "table"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._cell_started = False
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("style", "script"):
            self._skip += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")
            self._cell_started = False
        elif tag in ("td", "th"):
            if self._cell_started:
                self.parts.append(" | ")
            self._cell_started = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script"):
            self._skip = max(self._skip - 1, 0)

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(" ".join(data.split()) if data.strip() else "")


def html_to_text(html: str) -> str:
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    lines = [ln.strip() for ln in "".join(parser.parts).split("\n")]
    return "\n".join(ln for ln in lines if ln)


def clean_traceback(output: dict[str, Any]) -> str:
    """An error output as plain text: the traceback without ANSI colour codes."""
    tb = output.get("traceback")
    text = "\n".join(strip_ansi(str(line)) for line in tb) if isinstance(tb, list) and tb else ""
    head = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
    if not text:
        return head
    return text if head in text else text + "\n" + head


@dataclass(frozen=True)
class OutputText:
    """One output as text: ``kind`` is its output_type; ``mimes`` lists its formats."""

    kind: str
    text: str
    mimes: tuple[str, ...] = ()
    image: str | None = None  # the image mime, if the output is an image


def describe_image(mime: str, data: str) -> str:
    size = _image_size(mime, data)
    dims = f" {size[0]}x{size[1]}" if size else ""
    kb = max(image_bytes_len(data) // 1024, 1)
    return f"[{mime}{dims}, {kb} KB image]"


def output_text(output: dict[str, Any]) -> OutputText:
    """The readable text of one nbformat output."""
    kind = str(output.get("output_type", ""))
    if kind == "stream":
        return OutputText(kind, collapse_cr(strip_ansi(str(output.get("text", "")))))
    if kind == "error":
        return OutputText(kind, clean_traceback(output))
    data = output.get("data")
    if not isinstance(data, dict):
        return OutputText(kind, "")
    mimes = tuple(data)
    image = next((m for m in IMAGE_MIMES if m in data and m != "image/svg+xml"), None)
    if image is None and "image/svg+xml" in data:
        image = "image/svg+xml"
    if "text/plain" in data:
        plain = strip_ansi(_as_text(data["text/plain"]))
        if "text/html" in data and _looks_like_repr(plain):
            return OutputText(kind, html_to_text(_as_text(data["text/html"])), mimes, image)
        if image and _looks_like_repr(plain):
            return OutputText(kind, describe_image(image, _as_text(data[image])), mimes, image)
        return OutputText(kind, plain, mimes, image)
    if image:
        return OutputText(kind, describe_image(image, _as_text(data[image])), mimes, image)
    if "text/html" in data:
        return OutputText(kind, html_to_text(_as_text(data["text/html"])), mimes)
    for mime in _TEXT_PREFERENCE:
        if mime in data:
            return OutputText(kind, _as_text(data[mime]), mimes)
    return OutputText(kind, f"[{', '.join(mimes)} output]", mimes)


def _looks_like_repr(plain: str) -> bool:
    return plain.startswith("<") and plain.endswith(">") and "\n" not in plain


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value)


def source_preview(source: str, max_lines: int, max_chars: int) -> str:
    """The first lines of a source, with a note of how many lines were left out."""
    lines = source.splitlines()
    shown = "\n".join(lines[:max_lines])
    more = len(lines) - max_lines
    if len(shown) > max_chars:
        shown = shown[:max_chars] + "…"
    if more > 0:
        shown += f"\n… (+{more} more lines)"
    return shown


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

    def take(self, text: str, hint: str) -> tuple[str, int, bool]:
        """Fit ``text`` into the budget: (shown, characters cut, whether anything was shown)."""
        if self._recording is not None:
            self._recording.append(text)
            return text, 0, True
        if self._planned and self._planned[0][0] == len(text):
            limit = self._planned.popleft()[1]
        else:
            self._planned.clear()  # a different text than planned: plan no more
            left = max(self.remaining, 1) if self._wanted else 0  # spent: still its head
            limit = allocate([len(text)], left, self.per_output)[0]
        if limit <= 0 and text:
            return "", len(text), False
        shown, cut = truncate_middle(text, limit, hint=hint)
        self.remaining -= len(shown)
        return shown, cut, True

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
            (k, o, output_text(o))
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
            shown, cut, any_shown = budget.take(ot.text, hint)
            view: dict[str, Any] = {"output": k, "type": ot.kind}
            if out.get("output_type") == "stream":
                view["name"] = out.get("name", "stdout")
            if ot.image:
                view["image"] = ot.image
            if not any_shown and ot.text:
                view["text"] = ""
                view["omitted"] = f"{len(ot.text):,} characters not shown (output budget 0)"
            else:
                view["text"] = shown
            if ot.image and image_hint is not None:
                view["text"] = f"{view['text']} ({image_hint(n, k)})".lstrip()
            if cut:
                view["cut"] = cut
            views.append(view)
        rendered.append(views)
    return rendered


def outputs_summary(cell: Cell, max_chars: int = 120) -> str:
    """A one-line summary of a cell's outputs for overviews."""
    outs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
    if not outs:
        return ""
    first = ""
    for o in outs:
        ot = output_text(o)
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
        return "text/plain", collapse_cr(strip_ansi(_as_text(output.get("text", ""))))
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
            return mime, value if mime == "application/json" else _as_text(value)
    mime = next(iter(data))
    return mime, data[mime]
