"""Import: ipynb/JSON (nbformat 3 is upgraded) and jupytext's text formats (Markdown, MyST,
percent and light scripts) into a new notebook. jupytext and nbformat are imported lazily;
callers run ``import_notebook`` on a worker thread.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from nbrelay.errors import InvalidArgument, NotebookInvalid
from nbrelay.notebook.model import Notebook, from_dict

IMPORTS = ("auto", "ipynb", "json", "markdown", "myst", "percent", "light")


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
