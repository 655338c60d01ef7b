"""One output as an agent reads it: text without ANSI codes or carriage-return redraws, HTML as
text, images as a placeholder with their size, tracebacks clean, long text cut in the middle.
Pure: callers pass the limits in (``render.py`` shares a result's budget among outputs).
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

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
        plain = strip_ansi(as_text(data["text/plain"]))
        if "text/html" in data and _looks_like_repr(plain):
            return OutputText(kind, html_to_text(as_text(data["text/html"])), mimes, image)
        if image and _looks_like_repr(plain):
            return OutputText(kind, describe_image(image, as_text(data[image])), mimes, image)
        return OutputText(kind, plain, mimes, image)
    if image:
        return OutputText(kind, describe_image(image, as_text(data[image])), mimes, image)
    if "text/html" in data:
        return OutputText(kind, html_to_text(as_text(data["text/html"])), mimes)
    for mime in _TEXT_PREFERENCE:
        if mime in data:
            return OutputText(kind, as_text(data[mime]), mimes)
    return OutputText(kind, f"[{', '.join(mimes)} output]", mimes)


def _looks_like_repr(plain: str) -> bool:
    return plain.startswith("<") and plain.endswith(">") and "\n" not in plain


def as_text(value: Any) -> str:
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
