"""Notebook conversions: export to ipynb, Markdown, HTML, PDF and scripts; import from text formats
(``imports.py``); PDF printing with headless Chromium (``pdf.py``).

Exports go through nbconvert (Markdown, HTML, and PDF as nbconvert's HTML printed by headless
Chromium) and jupytext (scripts and MyST, the formats that round-trip); ipynb comes from the
notebook model's own writer. Imports read ipynb/JSON (nbformat 3 is upgraded) and jupytext's text
formats (Markdown, MyST, percent and light scripts).

Conversions take values and return values; the workspace decides where bytes come from and go.
nbconvert and jupytext are imported lazily and run on worker threads; Chromium runs as a child
process in its own process group with a deadline, killed on timeout or cancellation, on a page
whose Content-Security-Policy and host-resolver rules keep it off the network and off local files
(a notebook's HTML output cannot pull ``file:///`` content into the PDF).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from nbrelay.errors import (
    InvalidArgument,
    NbrelayError,
    NotebookInvalid,
)
from nbrelay.formats.imports import IMPORTS, guess_format, import_notebook
from nbrelay.formats.pdf import CHROMIUM_FLAGS, find_browser, print_pdf
from nbrelay.notebook.model import Notebook, serialize
from nbrelay.notebook.render import IMAGE_MIMES

__all__ = [
    "CHROMIUM_FLAGS",
    "EXPORTS",
    "IMPORTS",
    "SCRIPT_FORMATS",
    "Exported",
    "ImageLink",
    "export",
    "export_info",
    "find_browser",
    "guess_format",
    "import_notebook",
    "min_chars",
]

# name -> (file extension, mime type, binary)
EXPORTS: dict[str, tuple[str, str, bool]] = {
    "ipynb": (".ipynb", "application/x-ipynb+json", False),
    "json": (".json", "application/json", False),
    "markdown": (".md", "text/markdown", False),
    "html": (".html", "text/html", False),
    "pdf": (".pdf", "application/pdf", True),
    "script": (".py", "text/x-python", False),
    "percent": (".py", "text/x-python", False),
    "myst": (".md", "text/markdown", False),
}
SCRIPT_FORMATS = ("script", "percent", "myst")

# nbconvert's warnings (missing alt text…) are about the notebook, not for the server's log.
_QUIET = logging.getLogger("nbrelay.nbconvert")
_QUIET.setLevel(logging.ERROR)

ImageLink = Callable[[str, int, str], str]  # (cell id, output index, image mime) -> link


@dataclass(frozen=True)
class Exported:
    """One export: ``data`` is the file's bytes (UTF-8 for text formats); ``files`` are extra
    files that belong next to it (Markdown's images), by path relative to the export's folder."""

    format: str
    extension: str
    mime: str
    binary: bool
    data: bytes
    files: Mapping[str, bytes] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def export_info(fmt: str) -> tuple[str, str, bool]:
    try:
        return EXPORTS[fmt]
    except KeyError:
        raise InvalidArgument(
            f"unknown export format {fmt!r}.", hint=f"Formats: {', '.join(EXPORTS)}."
        ) from None


def _language(nb: Notebook) -> str:
    return (nb.language or "python").lower()


def _without_outputs(data: dict[str, Any]) -> dict[str, Any]:
    for cell in data.get("cells", []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return data


def _node(nb: Notebook, *, outputs: bool) -> Any:
    import nbformat

    data = copy.deepcopy(nb.data)
    if not outputs:
        _without_outputs(data)
    node = nbformat.from_dict(data)
    # An old notebook often has no language_info (a kernel adds it): the exporters need it for
    # code fences, highlighting and the script's extension.
    if not node.metadata.get("language_info"):
        node.metadata["language_info"] = {"name": _language(nb)}
    return node


def _jupytext_fmt(nb: Notebook, fmt: str) -> tuple[str, str]:
    """(jupytext format, file extension) for a script-like export."""
    if fmt == "myst":
        return "md:myst", ".md"
    from jupytext.languages import _SCRIPT_EXTENSIONS

    lang = _language(nb)
    ext = next((e for e, v in _SCRIPT_EXTENSIONS.items() if v["language"] == lang), ".py")
    return f"{ext[1:]}:{'percent' if fmt == 'percent' else 'light'}", ext


def _jupytext_export(nb: Notebook, fmt: str) -> tuple[bytes, str]:
    import jupytext

    jfmt, ext = _jupytext_fmt(nb, fmt)
    node = _node(nb, outputs=False)
    text = jupytext.writes(node, fmt=jfmt)
    return text.encode("utf-8"), ext


def _markdown_export(
    nb: Notebook, *, outputs: bool, stem: str, image_link: ImageLink | None
) -> tuple[bytes, dict[str, bytes]]:
    from nbconvert import MarkdownExporter

    node = _node(nb, outputs=outputs)
    links: dict[str, str] = {}
    if image_link is not None:
        # Inline: each image becomes a link (to the output's resource) instead of a file.
        for cell in node.cells:
            for k, out in enumerate(cell.get("outputs") or []):
                mimes = [m for m in IMAGE_MIMES if m in (out.get("data") or {})]
                if mimes:
                    token = f"nbrelay-image-{len(links)}"
                    links[token] = image_link(str(cell.get("id", "")), k, mimes[0])
                    out.setdefault("metadata", {})["filenames"] = dict.fromkeys(mimes, token)
        from traitlets.config import Config

        exporter = MarkdownExporter(
            config=Config({"ExtractOutputPreprocessor": {"enabled": False}})
        )
        body, _ = exporter.from_notebook_node(node, resources={"unique_key": stem})
        for token, link in links.items():
            body = body.replace(token, link)
        return body.encode("utf-8"), {}
    body, resources = MarkdownExporter(log=_QUIET).from_notebook_node(
        node, resources={"unique_key": stem, "output_files_dir": f"{stem}_files"}
    )
    files = {str(name): bytes(data) for name, data in (resources.get("outputs") or {}).items()}
    return body.encode("utf-8"), files


def _html(nb: Notebook, *, outputs: bool) -> str:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(log=_QUIET).from_notebook_node(_node(nb, outputs=outputs))
    return str(body)


_CELL_FLOOR = {"ipynb": 40, "json": 40, "html": 50, "markdown": 0, "myst": 0, "percent": 4}


def _solid(text: Any) -> int:
    """Characters of ``text`` other than whitespace (which converters may change)."""
    return len("".join(text.split())) if isinstance(text, str) else 0


def min_chars(nb: Notebook, fmt: str, *, outputs: bool = True) -> int:
    """A lower bound on the length of ``nb`` exported to a text ``fmt``, cheap to compute (no
    conversion, no copy): the non-space characters every converter keeps verbatim (code
    everywhere; Markdown text except in HTML, which renders it; stream outputs where outputs are
    kept) plus a floor per cell. An export is refused on it before any work is done."""
    if fmt not in _CELL_FLOOR and fmt != "script":
        return 0
    with_outputs = outputs and fmt in ("ipynb", "json", "markdown", "html")
    kept = {"code", "raw", "markdown"} if fmt in ("ipynb", "json") else {"code"}
    if fmt in ("markdown", "myst", "percent", "script"):
        kept.add("markdown")
    floor = _CELL_FLOOR.get(fmt, 0)
    total = 0
    for cell in nb.cells:
        kind = cell.get("cell_type")
        total += floor
        if kind in kept:
            total += _solid(cell.get("source"))
        if with_outputs and kind == "code":
            for out in cell.get("outputs") or ():
                if not isinstance(out, dict):
                    continue
                if out.get("output_type") == "stream":
                    total += _solid(out.get("text"))
                elif fmt in ("ipynb", "json") and isinstance(out.get("data"), dict):
                    total += sum(_solid(v) for v in out["data"].values())
    return total


async def export(
    nb: Notebook,
    fmt: str,
    *,
    outputs: bool = True,
    stem: str = "notebook",
    image_link: ImageLink | None = None,
    browser: Path | None = None,
    time_limit: float = 120.0,
    max_chars: int | None = None,
) -> Exported:
    """Convert ``nb`` to ``fmt`` (see ``EXPORTS``). ``stem`` names Markdown's image folder;
    ``image_link`` (inline Markdown) turns images into links instead of files. With
    ``max_chars`` a text export that is surely longer is refused before it is converted."""
    ext, mime, binary = export_info(fmt)
    if max_chars is not None and not binary:
        least = await anyio.to_thread.run_sync(lambda: min_chars(nb, fmt, outputs=outputs))
        if least > max_chars:
            raise InvalidArgument(
                f"the {fmt} export would be at least {least:,} characters, over "
                f"max_chars={max_chars:,}; nothing was converted.",
                hint="Pass save=true to write it next to the notebook, or a larger max_chars.",
            )
    try:
        return await _export(
            nb, fmt, ext, mime, binary, outputs, stem, image_link, browser, time_limit
        )
    except (NbrelayError, anyio.get_cancelled_exc_class()):
        raise
    except Exception as exc:  # nbconvert and jupytext refuse what they cannot convert
        raise NotebookInvalid(
            f"the notebook cannot be exported to {fmt}: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}.",
            hint="nbconvert and jupytext convert only valid notebooks: read_notebook lists the "
            "notebook's problems; fix them (or export to ipynb), then retry.",
        ) from exc


async def _export(
    nb: Notebook,
    fmt: str,
    ext: str,
    mime: str,
    binary: bool,
    outputs: bool,
    stem: str,
    image_link: ImageLink | None,
    browser: Path | None,
    time_limit: float,
) -> Exported:
    notes: list[str] = []
    files: dict[str, bytes] = {}
    if fmt in ("ipynb", "json"):
        data = copy.deepcopy(nb.data)
        data = data if outputs else _without_outputs(data)
        body = serialize(Notebook(data=data, ids_made=nb.ids_made))
    elif fmt in SCRIPT_FORMATS:
        body, ext = await anyio.to_thread.run_sync(_jupytext_export, nb, fmt)
        if outputs and any(c.get("outputs") for c in nb.cells):
            notes.append(f"{fmt} files hold no outputs; use ipynb, markdown, html or pdf for them.")
    elif fmt == "markdown":
        body, files = await anyio.to_thread.run_sync(
            lambda: _markdown_export(nb, outputs=outputs, stem=stem, image_link=image_link)
        )
    else:
        exe = find_browser(browser) if fmt == "pdf" else ""
        html = await anyio.to_thread.run_sync(lambda: _html(nb, outputs=outputs))
        if fmt == "html":
            body = html.encode("utf-8")
        else:
            body = await print_pdf(html, exe, time_limit)
            if "$" in html or "\\(" in html:
                notes.append("LaTeX math is printed as source (the PDF is rendered offline).")
    return Exported(fmt, ext, mime, binary, body, files, tuple(notes))
