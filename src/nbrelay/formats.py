"""Notebook conversions: export to ipynb, Markdown, HTML, PDF and scripts; import from text formats.

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

import contextlib
import copy
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
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
    StoreError,
    Unsupported,
)
from nbrelay.notebook.model import Notebook, from_dict, serialize
from nbrelay.notebook.render import IMAGE_MIMES

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
IMPORTS = ("auto", "ipynb", "json", "markdown", "myst", "percent", "light")
SCRIPT_FORMATS = ("script", "percent", "myst")

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_CSP = (
    '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
    "img-src data:; style-src 'unsafe-inline' data:; font-src data:; media-src data:\">"
)
_STDERR_TAIL = 600

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
    return nbformat.from_dict(data)


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
    if not node.metadata.get("language_info"):
        node.metadata["language_info"] = {"name": _language(nb)}
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


def _sealed(html: str) -> str:
    """The page with a Content-Security-Policy that lets in only inline data: no network, no
    local files, no scripts."""
    match = re.search(r"<head[^>]*>", html, flags=re.IGNORECASE)
    at = match.end() if match else 0
    return html[:at] + _CSP + html[at:]


def find_browser(configured: Path | None) -> str:
    """The Chromium executable: the configured one, or the first of ``BROWSERS`` on PATH."""
    if configured is not None:
        if not os.access(configured, os.X_OK):
            raise Unsupported(
                f"the browser {configured} (--browser) is not an executable file.",
                hint="Point --browser at Chromium, or leave it unset to use chromium from PATH.",
            )
        return str(configured)
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise Unsupported(
        "PDF export needs Chromium, and none was found on PATH.",
        hint="Install it (Debian/Ubuntu: apt-get install chromium) or set --browser; the other "
        "formats work without it.",
    )


# How nbrelay (and its tests) start headless Chromium on a machine without a display: no GPU, no
# sandbox (it runs as the current user, often root in containers), and no background requests.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


async def _print_pdf(html: str, browser: str, seconds: float) -> bytes:
    work = await anyio.to_thread.run_sync(lambda: tempfile.mkdtemp(prefix="nbrelay-pdf-"))
    try:
        page = Path(work) / "notebook.html"
        target = Path(work) / "notebook.pdf"
        await anyio.to_thread.run_sync(page.write_text, _sealed(html), "utf-8")
        argv = [
            browser,
            *CHROMIUM_FLAGS,
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--no-pdf-header-footer",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={work}/profile",
            f"--print-to-pdf={target}",
            page.as_uri(),
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": work,
            "XDG_CONFIG_HOME": work,
            "XDG_CACHE_HOME": work,
            "LANG": "C.UTF-8",
        }
        stderr = await _run_bounded(argv, env, seconds)
        data = await anyio.to_thread.run_sync(_read_if_exists, target)
        if not data or not data.startswith(b"%PDF"):
            raise StoreError(
                "Chromium did not produce a PDF.",
                hint=f"Its last words: {stderr[-_STDERR_TAIL:].strip() or '(none)'}",
            )
        return data
    finally:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(work, ignore_errors=True))


def _read_if_exists(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


async def _run_bounded(argv: list[str], env: dict[str, str], seconds: float) -> str:
    """Run a child in its own process group; kill the group on timeout or cancellation."""
    process = await anyio.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    chunks: list[bytes] = []

    async def drain() -> None:
        if process.stderr is None:
            return
        async for chunk in process.stderr:
            chunks.append(chunk)
            if sum(map(len, chunks)) > 64_000:
                del chunks[: len(chunks) // 2]

    try:
        with anyio.fail_after(seconds):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                await process.wait()
    except TimeoutError:
        raise StoreError(
            f"Chromium did not finish printing the PDF within {seconds:g} s.",
            hint="Retry; a very large notebook may need a longer --export-timeout.",
        ) from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await process.wait()
        await process.aclose()
    return b"".join(chunks).decode("utf-8", "replace")


# Characters every cell adds to an export at the least (its JSON keys, HTML wrappers, fences).
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
            body = await _print_pdf(html, exe, time_limit)
            if "$" in html or "\\(" in html:
                notes.append("LaTeX math is printed as source (the PDF is rendered offline).")
    return Exported(fmt, ext, mime, binary, body, files, tuple(notes))


# -- import ---------------------------------------------------------------------------------


def guess_format(text: str, filename: str | None = None) -> str:
    """The import format of ``text``, from the file extension when there is one, else from the
    text: JSON, MyST code cells, ``# %%`` markers, Python that compiles (a light script), or
    Markdown."""
    suffix = Path(filename).suffix.lower() if filename else ""
    if suffix in (".ipynb", ".json") or (not suffix and text.lstrip().startswith("{")):
        return "ipynb"
    if suffix in ("", ".md", ".markdown", ".myst", ".mystnb", ".mnb"):
        if suffix in (".myst", ".mystnb", ".mnb") or re.search(r"^```\{code-cell\}", text, re.M):
            return "myst"
        if suffix:
            return "markdown"
        if re.search(r"^# %%", text, re.M):
            return "percent"
        try:
            compile(text, "<import>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return "markdown"
        return "light"
    if re.search(r"^\s*(#|//|--|%) ?%%", text, re.M):
        return "percent"
    return "light"


def _script_ext(filename: str | None, language: str | None) -> str:
    from jupytext.languages import _SCRIPT_EXTENSIONS

    suffix = Path(filename).suffix.lower() if filename else ""
    if suffix in _SCRIPT_EXTENSIONS:
        return suffix
    lang = (language or "python").lower()
    return next((e for e, v in _SCRIPT_EXTENSIONS.items() if v["language"] == lang), ".py")


def _import_ipynb(text: str, name: str) -> Notebook:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookInvalid(
            f"{name} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            hint="Give the notebook's JSON text, or pick a text format (markdown, percent…).",
        ) from exc
    except RecursionError as exc:
        raise NotebookInvalid(f"{name} nests JSON values too deeply to read.") from exc
    if isinstance(data, dict) and isinstance(data.get("nbformat"), int) and data["nbformat"] < 4:
        import nbformat

        try:
            data = json.loads(nbformat.writes(nbformat.reads(text, as_version=4)))
        except Exception as exc:
            raise NotebookInvalid(
                f"{name} is an nbformat {data['nbformat']} notebook that could not be upgraded: "
                f"{str(exc)[:200]}."
            ) from exc
    return from_dict(data, name=name)


def _import_text(text: str, fmt: str, filename: str | None, language: str | None) -> Notebook:
    import jupytext

    if fmt == "markdown":
        jfmt = "md"
    elif fmt == "myst":
        jfmt = "md:myst"
    else:
        jfmt = f"{_script_ext(filename, language)[1:]}:{fmt}"
    try:
        node = jupytext.reads(text, fmt=jfmt)
    except Exception as exc:
        raise NotebookInvalid(
            f"the text could not be read as {fmt}: {type(exc).__name__}: {str(exc)[:200]}.",
            hint="Check the format argument (markdown, myst, percent, light, ipynb).",
        ) from exc
    data = json.loads(json.dumps(node))
    meta = data.setdefault("metadata", {})
    main = (meta.pop("jupytext", None) or {}).get("main_language")
    lang = (language or main or "python").lower()
    if "kernelspec" not in meta:
        kernel = "python3" if lang == "python" else lang
        meta["kernelspec"] = {
            "display_name": "Python 3 (ipykernel)" if kernel == "python3" else kernel,
            "language": lang,
            "name": kernel,
        }
    meta.setdefault("language_info", {"name": lang})
    return from_dict(data, name=filename or "the imported text")


def import_notebook(
    content: str, fmt: str = "auto", *, filename: str | None = None, language: str | None = None
) -> Notebook:
    """Parse ``content`` in ``fmt`` (see ``IMPORTS``; ``auto`` guesses from the file name and the
    text) into a new notebook. Sync: call it on a worker thread."""
    if fmt not in IMPORTS:
        raise InvalidArgument(
            f"unknown import format {fmt!r}.", hint=f"Formats: {', '.join(IMPORTS)}."
        )
    if not content.strip():
        raise InvalidArgument(
            "the content to import is empty.", hint="Give the text of a notebook or script."
        )
    kind = guess_format(content, filename) if fmt == "auto" else fmt
    name = filename or "the imported content"
    if kind in ("ipynb", "json"):
        return _import_ipynb(content, name)
    return _import_text(content, kind, filename, language)
