"""notebook-lr's own file format, ``.nblr``, read and written as a notebook.

A ``.nblr`` file is one JSON object::

    {"version": "1.0",
     "cells": [{"id", "type", "source", "outputs", "execution_count", "metadata"}, ...],
     "metadata": {"name", "created", "modified", ...},
     "session_state": ...}

Outputs are notebook-lr's: nbformat outputs whose ``output_type`` is called ``type``. Reading
turns the file into nbformat JSON (so the rest of nbrelay sees an ordinary notebook: the file's
``metadata`` becomes the notebook's, ``session_state`` is kept under ``metadata.nblr``);
writing turns a notebook back, with ``modified`` set to the time of the write.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook.model import Notebook, encode_json_text

SUFFIX = ".nblr"
VERSION = "1.0"
_KEPT = "nblr"  # notebook metadata key that keeps what only .nblr has (session_state, version)
_NOT_NBLR = ("kernelspec", "language_info", _KEPT)


def is_nblr(path: str) -> bool:
    return path.endswith(SUFFIX)


def _text(value: Any) -> str:
    return "".join(str(v) for v in value) if isinstance(value, list) else str(value or "")


def _output_in(out: Any) -> dict[str, Any] | None:
    if not isinstance(out, dict):
        return None
    kind = str(out.get("output_type") or out.get("type") or "")
    if kind == "stream":
        return {
            "output_type": "stream",
            "name": str(out.get("name") or "stdout"),
            "text": _text(out.get("text")),
        }
    if kind == "error":
        trace = out.get("traceback")
        return {
            "output_type": "error",
            "ename": str(out.get("ename", "")),
            "evalue": str(out.get("evalue", "")),
            "traceback": [str(t) for t in trace] if isinstance(trace, list) else [],
        }
    data = out.get("data")
    if not isinstance(data, dict):
        data = {"text/plain": _text(out.get("text"))}
    view: dict[str, Any] = {
        "output_type": "execute_result" if kind == "execute_result" else "display_data",
        "data": data,
        "metadata": out.get("metadata") if isinstance(out.get("metadata"), dict) else {},
    }
    if view["output_type"] == "execute_result":
        count = out.get("execution_count")
        view["execution_count"] = count if isinstance(count, int) else None
    return view


def to_ipynb(raw: bytes, *, name: str) -> bytes:
    """The nbformat JSON of a ``.nblr`` file's bytes.

    Raises:
        NotebookInvalid: the bytes are not a ``.nblr`` object.
    """
    try:
        doc = json.loads(raw.decode("utf-8")) if raw.strip() else {"cells": []}
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotebookInvalid(
            f"{name!r} is not a valid .nblr file: {exc}.",
            hint="A .nblr file is a JSON object with a 'cells' list.",
        ) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("cells", []), list):
        raise NotebookInvalid(
            f"{name!r} is not a valid .nblr file: it has no 'cells' list.",
            hint="A .nblr file is a JSON object with a 'cells' list.",
        )
    cells: list[dict[str, Any]] = []
    for item in doc.get("cells", []):
        if not isinstance(item, dict):
            continue
        kind = str(item.get("type") or item.get("cell_type") or "code")
        kind = kind if kind in ("code", "markdown", "raw") else "code"
        cell: dict[str, Any] = {
            "cell_type": kind,
            "metadata": item.get("metadata") if isinstance(item.get("metadata"), dict) else {},
            "source": _text(item.get("source")),
        }
        if item.get("id"):
            cell["id"] = str(item["id"])
        if kind == "code":
            count = item.get("execution_count")
            cell["execution_count"] = count if isinstance(count, int) else None
            found = (_output_in(o) for o in item.get("outputs") or [])
            cell["outputs"] = [o for o in found if o is not None]
        cells.append(cell)
    meta = doc.get("metadata")
    metadata: dict[str, Any] = dict(meta) if isinstance(meta, dict) else {}
    kept = {k: doc[k] for k in ("version", "session_state") if k in doc}
    if kept:
        metadata[_KEPT] = kept
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata, "cells": cells}
    return json.dumps(nb, ensure_ascii=False).encode("utf-8")


def _output_out(out: dict[str, Any]) -> dict[str, Any]:
    view = {"type": out.get("output_type", "")}
    view.update({k: v for k, v in out.items() if k != "output_type"})
    if isinstance(view.get("text"), list):
        view["text"] = _text(view["text"])
    return view


def dump(nb: Notebook, *, path: str | None = None, now: datetime | None = None) -> bytes:
    """A notebook as ``.nblr`` bytes, its metadata as notebook-lr writes it: ``name``
    ("Untitled" unless set), ``created``, ``modified`` (``now``) and ``path`` (where it is saved,
    when given)."""
    meta = dict(nb.data.get("metadata") or {})
    found = meta.get(_KEPT)
    kept: dict[str, Any] = found if isinstance(found, dict) else {}
    stamp = (now or datetime.now(UTC)).isoformat()
    metadata = {k: v for k, v in meta.items() if k not in _NOT_NBLR}
    metadata.setdefault("name", "Untitled")
    metadata.setdefault("created", stamp)
    metadata["modified"] = stamp
    if path is not None:
        metadata["path"] = path
    cells = []
    for cell in nb.cells:
        code = cell.get("cell_type") == "code"
        outputs = cell.get("outputs") if code else []
        count = cell.get("execution_count") if code else None
        cells.append(
            {
                "id": cell.get("id"),
                "type": cell.get("cell_type", "code"),
                "source": _text(cell.get("source")),
                "outputs": [_output_out(o) for o in outputs or [] if isinstance(o, dict)],
                "execution_count": count,
                "metadata": cell.get("metadata") or {},
            }
        )
    doc = {
        "version": str(kept.get("version") or VERSION),
        "cells": cells,
        "metadata": metadata,
        "session_state": kept.get("session_state"),
    }
    return encode_json_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")


def decode(path: str, raw: bytes) -> bytes:
    """A file's bytes as nbformat JSON: converted when ``path`` is a ``.nblr`` file."""
    return to_ipynb(raw, name=path) if is_nblr(path) else raw
