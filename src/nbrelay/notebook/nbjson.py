"""nbformat's on-disk JSON shape: multi-line strings split into lines (sources, text outputs,
text-like MIME bundles and attachments), transient fields dropped, and the text encoded as UTF-8
file bytes. ``model.serialize`` writes a notebook with these; nothing here knows the model.
"""

from __future__ import annotations

from typing import Any

from nbrelay.errors import NotebookInvalid

Cell = dict[str, Any]

_SPLIT_NON_TEXT = frozenset({"application/javascript", "image/svg+xml"})


def encode_json_text(text: str) -> bytes:
    """A serialised notebook's text as UTF-8 file bytes.

    Raises:
        NotebookInvalid: the text holds an unpaired surrogate (not valid Unicode), which no file
            may hold; the message shows it, escaped.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NotebookInvalid(
            "the notebook would contain text that is not valid Unicode (an unpaired surrogate, "
            f"{text[exc.start : exc.end]!a}); nothing was written.",
            hint="Remove unpaired surrogate characters (U+D800-U+DFFF) from the text you passed.",
        ) from exc


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return value.splitlines(True)
    return value


def _split_bundle(bundle: dict[str, Any]) -> dict[str, Any]:
    return {
        mime: _split(v) if (mime.startswith("text/") or mime in _SPLIT_NON_TEXT) else v
        for mime, v in bundle.items()
    }


def split_cell(cell: Cell) -> Cell:
    out = dict(cell)
    if "source" in out:
        out["source"] = _split(out["source"])
    meta = out.get("metadata")
    if isinstance(meta, dict) and "trusted" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "trusted"}
    if isinstance(out.get("attachments"), dict):
        out["attachments"] = {
            k: _split_bundle(v) if isinstance(v, dict) else v for k, v in out["attachments"].items()
        }
    if out.get("cell_type") == "code" and isinstance(out.get("outputs"), list):
        outputs = []
        for o in out["outputs"]:
            if isinstance(o, dict):
                o = dict(o)
                if o.get("output_type") in ("execute_result", "display_data") and isinstance(
                    o.get("data"), dict
                ):
                    o["data"] = _split_bundle(o["data"])
                elif o.get("output_type") == "stream":
                    o["text"] = _split(o.get("text", ""))
            outputs.append(o)
        out["outputs"] = outputs
    return out
