"""One call sequence for datalayer's jupyter-mcp-server 2.2.4 and nbrelay's profile of it.

``write_fixtures`` lays the same files out under a root; ``STEPS`` are the calls, in order (a
third are errors: out of range, missing file, wrong type, empty notebook); ``normalise`` turns a
result into what is compared: the error flag, the text and the structured content, with cell ids,
kernel ids, times and paths of the run masked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mcp_types import CallToolResult, ImageContent, TextContent

from nbrelay.notebook.model import new_cell, new_notebook, serialize

Step = tuple[str, dict[str, Any]]

NB = {"notebook_name": "nb"}
EMPTY = {"notebook_name": "empty"}


def write_fixtures(root: Path) -> None:
    """demo.ipynb (a markdown cell, two code cells, one with an output), empty.ipynb (no cells),
    sub/other.ipynb and a text file."""
    cells = [
        new_cell("markdown", "# Title\nSome prose", "md-0"),
        new_cell("code", "x = 1\nprint(x)", "code-1"),
        new_cell("code", "y = x + 1\ny", "code-2"),
    ]
    cells[1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "1\n"}]
    cells[1]["execution_count"] = 1
    (root / "sub").mkdir(parents=True, exist_ok=True)
    (root / "demo.ipynb").write_bytes(serialize(new_notebook(cells)))
    (root / "empty.ipynb").write_bytes(serialize(new_notebook([])))
    (root / "sub" / "other.ipynb").write_bytes(
        serialize(new_notebook([new_cell("code", "pass", "o-0")]))
    )
    (root / "notes.txt").write_text("plain text\n")


STEPS: list[Step] = [
    ("list_notebooks", {}),
    ("list_files", {}),
    ("list_files", {"path": "sub"}),
    ("list_files", {"path": "nowhere"}),  # missing folder
    ("use_notebook", {**NB, "notebook_path": "demo.ipynb"}),
    ("list_notebooks", {}),
    ("read_notebook", NB),
    ("read_notebook", {**NB, "response_format": "detailed", "start_index": 1, "limit": 1}),
    ("read_cell", {"cell_index": 1}),
    ("read_cell", {"cell_index": 0, "include_outputs": False}),
    ("read_cell", {"cell_index": 99}),  # out of range
    ("read_cell", {"cell_index": "one"}),  # wrong type
    ("insert_cell", {"cell_index": -1, "cell_type": "code", "cell_source": "z = 3"}),
    ("insert_cell", {"cell_index": 99, "cell_type": "code", "cell_source": "w = 0"}),  # range
    ("insert_cell", {"cell_index": 0, "cell_type": "python", "cell_source": "q"}),  # type
    ("insert_cell", {"cell_index": 1, "cell_type": "markdown", "cell_source": "## Part"}),
    ("overwrite_cell_source", {"cell_index": 4, "cell_source": "z = 4\nz"}),
    ("overwrite_cell_source", {"cell_index": 42, "cell_source": "nothing"}),  # range
    ("edit_cell_source", {"cell_index": 4, "old_string": "4", "new_string": "5"}),
    ("edit_cell_source", {"cell_index": 4, "old_string": "absent", "new_string": "x"}),  # none
    (
        "edit_cell_source",
        {"cell_index": 2, "old_string": "x", "new_string": "xx", "replace_all": True},
    ),
    ("execute_cell", {"cell_index": 2}),
    ("execute_cell", {"cell_index": 4}),
    ("execute_cell", {"cell_index": 50}),  # out of range
    ("insert_execute_code_cell", {"cell_index": -1, "cell_source": "print('hi')"}),
    ("execute_code", {"code": "21 * 2"}),
    ("execute_code", {"code": "1 / 0"}),
    ("execute_code", {"code": "print('a')", "timeout": "soon"}),  # wrong type
    ("read_cell", {"cell_index": 2}),
    ("clear_cell_output", {"cell_index": 2}),
    ("clear_cell_output", {"cell_index": 0}),  # a markdown cell
    ("move_cell", {"source_index": 4, "target_index": 1}),
    ("move_cell", {"source_index": 99, "target_index": 0}),  # out of range
    ("read_notebook", {**NB, "limit": 0}),
    ("delete_cell", {"cell_indices": [5]}),
    ("delete_cell", {"cell_indices": [77]}),  # out of range
    ("use_notebook", {"notebook_name": "ghost", "notebook_path": "missing.ipynb"}),  # missing
    ("use_notebook", {**EMPTY, "notebook_path": "empty.ipynb"}),
    ("read_notebook", EMPTY),
    ("read_cell", {"cell_index": 0}),  # empty notebook
    ("delete_cell", {"cell_indices": [0]}),  # empty notebook
    ("execute_cell", {"cell_index": 0}),  # empty notebook
    ("insert_cell", {"cell_index": 0, "cell_type": "code", "cell_source": "first = 1"}),
    ("read_notebook", {"notebook_name": "unknown"}),  # not in use
    ("list_files", {"pattern": "**/o*.ipynb", "max_depth": 2}),
    ("list_notebooks", {}),
    ("unuse_notebook", {"notebook_name": "ghost"}),  # not in use
    ("unuse_notebook", EMPTY),
    ("use_notebook", {"notebook_name": "fresh", "notebook_path": "fresh.ipynb", "mode": "create"}),
    ("read_notebook", {"notebook_name": "fresh"}),
    ("restart_notebook", NB),
]

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX = re.compile(r"\b[0-9a-f]{32}\b")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?")
_SECONDS = re.compile(r"\b\d+(\.\d+)?\s*(s|seconds)\b")
# How a run went, moment by moment (datalayer polls the cell once a second and notes new outputs
# and progress as they happen to arrive): a trace of timing, left out like times.
_TIMELINE = re.compile(r"\[<time>\] \d+ new output\(s\), \d+ total|\[PROGRESS: .*\]")


def mask(text: str, ids: dict[str, str]) -> str:
    """Ids as ``<id1>``, ``<id2>`` … in order of first appearance (the same id keeps its name);
    times and durations as ``<time>``."""

    def name(match: re.Match[str]) -> str:
        return ids.setdefault(match.group(0), f"<id{len(ids) + 1}>")

    text = _UUID.sub(name, text)
    text = _HEX.sub(name, text)
    text = _TIME.sub("<time>", text)
    return _SECONDS.sub("<time>", text)


def _masked(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return mask(value, ids)
    if isinstance(value, list):
        return [_masked(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v, ids) for k, v in value.items()}
    return value


def _timing(value: Any) -> bool:
    return isinstance(value, str) and _TIMELINE.fullmatch(value) is not None


def normalise(result: CallToolResult, ids: dict[str, str]) -> dict[str, Any]:
    """What is compared of one result: error flag, content blocks, structured content."""
    blocks: list[Any] = []
    for block in result.content:
        if isinstance(block, TextContent):
            blocks.append(mask(block.text, ids))
        elif isinstance(block, ImageContent):
            blocks.append({"image": block.mime_type})
        else:
            blocks.append({"other": block.type})
    structured = _masked(result.structured_content, ids)
    if isinstance(structured, dict) and isinstance(structured.get("outputs"), list):
        for key in ("outputs", "result"):
            structured[key] = [v for v in structured[key] if not _timing(v)]
        structured["count"] = len(structured["outputs"])
    return {
        "error": bool(result.is_error),
        "content": [b for b in blocks if not _timing(b)],
        "structured": structured,
    }


def dump(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=1, sort_keys=True)
