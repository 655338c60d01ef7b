"""One output as an agent reads it: text without ANSI codes or carriage-return redraws, HTML as
text, images as a placeholder with their size, tracebacks clean, long text cut in the middle.
Pure: callers pass the limits in (``render.py`` shares a result's budget among outputs).

A read of a huge output does work bounded by what it can show, not by the output's size: given
a ``window``, only the first and last ``window`` characters of a text are cleaned (the first
``HTML_WINDOW`` times that of an HTML page is converted), and ``OutputText`` says how many
characters were left unread and where.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml")
_TEXT_PREFERENCE = ("text/markdown", "text/latex", "application/json")
# What an object displays as text when its text/plain is only its repr (IPython's Markdown,
# Latex and Math objects): what a person reads in JupyterLab.
_WRITTEN = ("text/markdown", "text/latex")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


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


def truncate_middle(
    text: str, limit: int, *, hint: str = "", unread: int = 0, seam: int | None = None
) -> tuple[str, int]:
    """Keep the head and tail of ``text`` within ``limit`` characters; return (text, cut).

    The marker says how much was cut and, when given, how to read the rest. A text that would
    lose no more than the marker costs is returned whole: a notice never costs more than the
    text it hides. ``unread`` characters of the output are missing from ``text`` at ``seam``
    (a windowed ``OutputText``): the cut always spans the seam and counts them.
    """
    if limit <= 0:
        return "", len(text) + unread
    if not unread:
        if len(text) <= limit or len(text) - limit <= len(_marker(len(text) - limit, hint)):
            return text, 0
        head_n = max(limit * 2 // 3, 1)
        tail_n = max(limit - head_n, 0)
    else:
        seam = len(text) if seam is None else min(max(seam, 0), len(text))
        head_n = min(max(limit * 2 // 3, 1), seam)
        tail_n = min(max(limit - head_n, 0), len(text) - seam)
        head_n = min(max(limit - tail_n, 0), seam)
    cut = len(text) - head_n - tail_n + unread
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


class _TableRows(HTMLParser):
    """The rows of an HTML table's head and body, each a list of cell texts (``th`` and ``td``).
    Without a ``thead``, a first row of ``th`` cells only is the head."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.head: list[list[str]] = []
        self.body: list[list[str]] = []
        self._section = "body"
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._only_th = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "thead":
            self._section = "head"
        elif tag == "tbody":
            self._section = "body"
        elif tag == "tr":
            self._row = []
            self._only_th = True
            (self.head if self._section == "head" else self.body).append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            self._only_th = self._only_th and tag == "th"
            self._row.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row[-1] = " ".join("".join(self._cell).split())
            self._cell = None
        elif tag == "thead":
            self._section = "body"
        elif (
            tag == "tr"
            and self._row
            and self._only_th
            and not self.head
            and self.body == [self._row]
        ):
            self.head.append(self.body.pop())

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_table_rows(html: str) -> tuple[list[list[str]], list[list[str]]]:
    """The (head, body) rows of the first tables in ``html``; rows without cells are left out."""
    parser = _TableRows()
    parser.feed(html)
    parser.close()
    return [r for r in parser.head if r], [r for r in parser.body if r]


_CLASS_REPR = re.compile(r"<class '([\w.]+)'>")


def error_name(output: dict[str, Any]) -> str:
    """An error output's exception name as a traceback shows it: some kernels send the class's
    repr (xeus-python: ``<class 'ZeroDivisionError'>``), some none at all (bash_kernel)."""
    name = str(output.get("ename") or "").strip()
    plain = _CLASS_REPR.fullmatch(name)
    return plain.group(1) if plain else name or "Error"


def clean_traceback(output: dict[str, Any]) -> str:
    """An error output as plain text: the traceback without ANSI colour codes."""
    tb = output.get("traceback")
    text = "\n".join(strip_ansi(str(line)) for line in tb) if isinstance(tb, list) and tb else ""
    head = f"{error_name(output)}: {output.get('evalue', '')}"
    if not text:
        return head
    return text if head in text else text + "\n" + head


@dataclass(frozen=True)
class OutputText:
    """One output as text: ``kind`` is its output_type; ``mimes`` lists its formats. A windowed
    read leaves ``unread`` characters of the stored output out of ``text``, at ``seam``."""

    kind: str
    text: str
    mimes: tuple[str, ...] = ()
    image: str | None = None  # the image mime, if the output is an image
    unread: int = 0
    seam: int = 0


# Of an HTML page longer than this many windows, only that much is converted to text (its end is
# not text that can be converted on its own).
HTML_WINDOW = 4
# A text at most this much longer than its two windows is read whole.
_WINDOW_SLACK = 1000


def _windowed(
    kind: str,
    raw: str,
    clean: Callable[[str], str],
    window: int | None,
    mimes: tuple[str, ...] = (),
    image: str | None = None,
) -> OutputText:
    """``raw`` made readable by ``clean``: whole, or (past two ``window``s) its two ends."""
    if window is None or len(raw) <= 2 * window + _WINDOW_SLACK:
        return OutputText(kind, clean(raw), mimes, image)
    head = clean(raw[:window])
    tail = clean(raw[len(raw) - window :])
    return OutputText(kind, head + tail, mimes, image, len(raw) - 2 * window, len(head))


def html_text(
    html: str, window: int | None, kind: str = "", mimes: tuple[str, ...] = ()
) -> OutputText:
    """An HTML page as text: whole, or (past ``HTML_WINDOW`` windows) its start's."""
    if window is None or len(html) <= HTML_WINDOW * window + _WINDOW_SLACK:
        return OutputText(kind, html_to_text(html), mimes)
    text = html_to_text(html[: HTML_WINDOW * window])
    return OutputText(kind, text, mimes, None, len(html) - HTML_WINDOW * window, len(text))


def _readable(text: str) -> str:
    return collapse_cr(strip_ansi(text))


# JSON sizes of big JSON values, by identity (notebook data is never changed in place: an edit
# makes new values), so reading the same figure again does not encode it again. Each entry
# holds its value, so an id is not reused while it is remembered.
_JSON_SIZES: dict[int, tuple[Any, int]] = {}
_JSON_SIZES_KEPT = 256
_JSON_SIZES_FLOOR = 100_000  # smaller values are encoded again (it costs little)


def value_size(value: Any) -> int:
    """Characters of one stored value: a string's, or JSON data's as JSON text (the notebook
    model keeps text formats as one string, JSON formats as data)."""
    if isinstance(value, str):
        return len(value)
    hit = _JSON_SIZES.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    size = len(json_text(value))
    if size > _JSON_SIZES_FLOOR:
        _JSON_SIZES[id(value)] = (value, size)
        while len(_JSON_SIZES) > _JSON_SIZES_KEPT:
            del _JSON_SIZES[next(iter(_JSON_SIZES))]
    return size


def json_head(value: Any, limit: int) -> str:
    """The first ``limit`` characters of ``json_text(value)``, encoding only about that much."""
    if isinstance(value, str):
        return value[:limit]
    parts: list[str] = []
    got = 0
    for chunk in json.JSONEncoder(ensure_ascii=False, sort_keys=True).iterencode(value):
        parts.append(chunk)
        got += len(chunk)
        if got >= limit:
            break
    return "".join(parts)[:limit]


def output_size(output: dict[str, Any]) -> int:
    """Characters an output holds: a stream's text, an error's traceback, a rich output's data
    (all its formats)."""
    kind = output.get("output_type")
    if kind == "stream":
        return value_size(output.get("text", ""))
    if kind == "error":
        tb = output.get("traceback")
        return sum(len(str(x)) for x in tb) if isinstance(tb, list) else 0
    return sum(mime_sizes(output).values())


def mime_sizes(output: dict[str, Any]) -> dict[str, int]:
    """A rich output's formats with the characters each holds (empty for streams and errors)."""
    data = output.get("data")
    if not isinstance(data, dict):
        return {}
    return {str(mime): value_size(data[mime]) for mime in sorted(data)}  # as nbformat stores them


def no_text(sizes: dict[str, int]) -> str:
    """The text of an output with nothing to read as text: its formats and sizes."""
    listed = ", ".join(f"{mime} ({n:,} characters)" for mime, n in sizes.items())
    return f"[no text to read: {listed}]" if listed else "[empty output]"


def describe_image(mime: str, data: str) -> str:
    size = _image_size(mime, data)
    dims = f" {size[0]}x{size[1]}" if size else ""
    kb = max(image_bytes_len(data) // 1024, 1)
    return f"[{mime}{dims}, {kb} KB image]"


def output_text(output: dict[str, Any], window: int | None = None) -> OutputText:
    """The readable text of one nbformat output; with a ``window``, reading a huge one costs
    about that many characters (see the module docstring)."""
    found = _output_text(output, window)
    if not found.text.strip() and found.kind in ("display_data", "execute_result"):
        sizes = mime_sizes(output)
        if any(sizes.values()):  # e.g. a plotly page: scripts only, no visible text
            return OutputText(found.kind, no_text(sizes), found.mimes, found.image)
    return found


def _output_text(output: dict[str, Any], window: int | None) -> OutputText:
    kind = str(output.get("output_type", ""))
    if kind == "stream":
        return _windowed(kind, as_text(output.get("text", "")), _readable, window)
    if kind == "error":
        return _windowed(kind, clean_traceback(output), lambda t: t, window)
    data = output.get("data")
    if not isinstance(data, dict):
        return OutputText(kind, "")
    mimes = tuple(data)
    image = next((m for m in IMAGE_MIMES if m in data and m != "image/svg+xml"), None)
    if image is None and "image/svg+xml" in data:
        image = "image/svg+xml"
    if "text/plain" in data:
        plain = as_text(data["text/plain"])
        if "text/html" in data and _looks_like_repr(plain):
            return html_text(as_text(data["text/html"]), window, kind, mimes)
        written = next((m for m in _WRITTEN if m in data), None)
        if written and _looks_like_repr(plain):  # display(Markdown(…)), Latex, Math
            return _windowed(kind, as_text(data[written]), lambda t: t, window, mimes, image)
        if image and _looks_like_repr(plain):
            return OutputText(kind, describe_image(image, as_text(data[image])), mimes, image)
        return _windowed(kind, plain, strip_ansi, window, mimes, image)
    if image:
        return OutputText(kind, describe_image(image, as_text(data[image])), mimes, image)
    if "text/html" in data:
        page = html_text(as_text(data["text/html"]), window, kind, mimes)
        if page.text.strip():
            return page
    # Then text formats, then JSON data (a plotly figure's data is its text when its HTML is
    # only a script).
    for mime in (*_TEXT_PREFERENCE, *sorted(m for m in data if m.endswith("+json"))):
        if mime in data:
            value = data[mime]
            if isinstance(value, str) or window is None:
                return _windowed(kind, json_text(value), lambda t: t, window, mimes)
            size = value_size(value)
            if size <= 2 * window + _WINDOW_SLACK:
                return OutputText(kind, json_text(value), mimes)
            head = json_head(value, 2 * window)
            return OutputText(kind, head, mimes, None, size - len(head), len(head))
    if "text/html" in data:
        return OutputText(kind, "", mimes)  # said by output_text: no text to read
    return OutputText(kind, f"[{', '.join(mimes)} output]", mimes)


def json_text(value: Any) -> str:
    """JSON data (``application/json``, ``application/vnd.plotly.v1+json``…) as JSON text,
    keys sorted as nbformat stores them."""
    return (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    )


def _looks_like_repr(plain: str) -> bool:
    return plain.startswith("<") and plain.endswith(">") and "\n" not in plain


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value)


PREVIEW_LINES = 8  # a source's preview in an overview: its first lines …
PREVIEW_CHARS = 600  # … and at most this many characters of them


def source_preview(
    source: str, max_lines: int = PREVIEW_LINES, max_chars: int = PREVIEW_CHARS
) -> str:
    """The first lines of a source, with a note of how many lines were left out."""
    lines = source.splitlines()
    shown = "\n".join(lines[:max_lines])
    more = len(lines) - max_lines
    if len(shown) > max_chars:
        shown = shown[:max_chars] + "…"
    if more > 0:
        shown += f"\n… (+{more} more lines)"
    return shown


def holds_preview(
    text: str, source: str, max_lines: int = PREVIEW_LINES, max_chars: int = PREVIEW_CHARS
) -> bool:
    """Whether ``text`` holds the shortened preview of ``source`` (``source_preview``: cut with
    "…" after ``max_chars`` characters, or followed by "… (+N more lines)"), where the source
    itself does not read so: a preview written back as if it were the whole source."""
    lines = source.splitlines()
    shown = "\n".join(lines[:max_lines])
    if len(shown) > max_chars:
        cut = shown[:max_chars] + "…"
        return cut in text and not source.startswith(cut)
    if len(lines) > max_lines:
        cut = shown + "\n… (+"
        return cut in text and cut not in source
    return False
