"""A run's result as the text a model reads (canonical profile): what a person would write.

The structured result (``ExecutionResult``, in ``structuredContent``) keeps every field; its text
is one header line per cell (``cell 3 (a1b2c3d4) [7] ok``, with its time from a second on) followed by what the cell
printed, cells that were skipped or queued in one line, and the run's note last. Compact JSON
spent a third more characters than that on quotes, escapes and field names, on every run.

The text is made from the structured data alone (``run_text(data)``), so both always agree.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from nbrelay.tools._boundary import compact_json
from nbrelay.tools.results import ExecutionResult

SHOWN_SECONDS = 1.0  # a cell's time is said from this on (every run's is in the structured form)
TRACEBACK_CHARS = 1500  # a run's traceback past this: its last frames and the exception
_GROUPED = ("skipped", "queued", "cancelled")  # statuses said once for a run of cells


def run_text(data: dict[str, Any]) -> str:
    """The text of a run result (``ExecutionResult`` as dumped, ``None`` fields left out)."""
    lines: list[str] = []
    group: tuple[str, list[int]] | None = None

    def flush() -> None:
        nonlocal group
        if group is not None:
            status, indexes = group
            lines.append(f"{_cells(indexes)} {status}")
            group = None

    for cell in data.get("cells") or []:
        status = str(cell.get("status", ""))
        index = cell.get("index")
        if (
            status in _GROUPED
            and index is not None
            and not (cell.get("outputs") or cell.get("note"))
        ):
            if group is not None and group[0] == status and group[1][-1] == index - 1:
                group[1].append(index)
            else:
                flush()
                group = (status, [index])
            continue
        flush()
        lines.append(_header(cell))
        for out in cell.get("outputs") or []:
            lines.extend(_output(out, data.get("path"), cell.get("id")))
    flush()
    if data.get("status") not in (None, "done") and not data.get("note"):
        lines.append(f"still {data['status']}")
    if data.get("note"):
        lines.append(f"note: {data['note']}")
    return "\n".join(lines)


def _header(cell: dict[str, Any]) -> str:
    parts = []
    if cell.get("index") is not None:
        parts.append(f"cell {cell['index']} ({cell.get('id')})")
    if cell.get("execution_count") is not None:
        parts.append(f"[{cell['execution_count']}]")
    parts.append(str(cell.get("status", "")))
    if (cell.get("seconds") or 0) >= SHOWN_SECONDS:
        parts.append(f"{cell['seconds']:g} s")
    line = " ".join(parts)
    return f"{line}: {cell['note']}" if cell.get("note") else line


def _output(out: dict[str, Any], path: Any, cell: Any) -> list[str]:
    text = str(out.get("text", ""))
    if out.get("type") == "error":
        text = short_traceback(text, _pointer(path, cell, out.get("output")))
    if text.endswith("\n"):
        text = text[:-1]
    if out.get("offset"):
        text = "…" + text  # the output's text before this was returned by an earlier call
    if out.get("name") == "stderr" and text:
        text = "[stderr] " + text
    if out.get("omitted"):
        text = f"{text} [{out['omitted']}]".lstrip()
    return [text] if text else []


def _pointer(path: Any, cell: Any, output: Any) -> str:
    if path is None or cell is None or output is None:
        return ""  # scratch code: its outputs are not stored
    return f"read_output(path={json.dumps(path)}, cell={json.dumps(cell)}, output={output})"


_RULE = re.compile(r"-{20,}\n")  # IPython's rule above a traceback: decoration only
_HEAD = re.compile(r"^(\S+) {2,}Traceback")  # "KeyError          Traceback (most recent…"
_FRAME = re.compile(r"^(Cell In\[|File |  File |Input In \[)", re.MULTILINE)


def short_traceback(text: str, pointer: str = "", limit: int = TRACEBACK_CHARS) -> str:
    """A traceback without IPython's rule, and past ``limit`` characters only its last frames
    and the exception (always kept whole), saying how many frames were left out and where the
    whole traceback is (``pointer``, a read_output call)."""
    text = _RULE.sub("", text, count=1) if text.startswith("-") else text
    text = _HEAD.sub(r"\1 Traceback", text, count=1)
    if len(text) <= limit:
        return text
    # IPython separates frames (and chained exceptions) by blank lines; a plain Python
    # traceback is one block, whose units are its lines.
    sep = "\n\n" if text.count("\n\n") >= 2 else "\n"
    parts = text.split(sep)
    kept = [parts.pop()]
    size = len(kept[0])
    while parts and size + len(parts[-1]) + len(sep) <= limit:
        size += len(parts[-1]) + len(sep)
        kept.append(parts.pop())
    if not parts:
        return text
    left_out = sep.join(parts)
    frames = len(_FRAME.findall(left_out))
    what = f"{frames} earlier frame(s)" if frames else f"{left_out.count(chr(10)) + 1} line(s)"
    where = f"; {pointer} shows the whole traceback" if pointer else ""
    return f"[… {what} left out{where}]\n" + sep.join(reversed(kept))


def _cells(indexes: list[int]) -> str:
    if len(indexes) == 1:
        return f"cell {indexes[0]}"
    return f"cells {indexes[0]}-{indexes[-1]}"


def canonical_text(model: BaseModel, data: dict[str, Any]) -> str | None:
    """The canonical profile's text of a tool result: a run as ``run_text``; a result carrying
    a run (an edit that ran its cells, a restart that ran all) as its compact JSON without the
    run, then the run's text; anything else as compact JSON (``None``)."""
    if isinstance(model, ExecutionResult):
        return run_text(data)
    run = data.get("execution")
    if isinstance(run, dict):
        rest = {k: v for k, v in data.items() if k != "execution"}
        return compact_json(rest) + "\n" + run_text(run)
    return None
