"""Kernel messages → nbformat outputs: the fold every execution path shares.

``CellOutputs.feed(msg)`` takes the IOPub messages of one cell's execution, in order, and keeps the
cell's outputs as Jupyter front ends show them:

* consecutive ``stream`` messages of one name merge into one output; carriage returns and
  backspaces are applied as a terminal would (``10%\\r20%\\r`` keeps ``20%\\r``: a trailing ``\\r``
  waits for the next chunk), ANSI colours are kept (readers strip them);
* ``clear_output`` clears at once, or with ``wait=True`` just before the next output arrives;
* ``display_data`` or ``execute_result`` with a ``transient.display_id`` is replaced by a later
  ``update_display_data``, or a later output, with that id (in any cell of the same run:
  ``RunOutputs`` routes it);
* what code prints, displays or clears inside an ipywidgets ``Output`` widget (``with out:``)
  goes to the widget, not to the cell: the widget says so by setting its ``msg_id`` to the
  request's (a ``comm_msg``), as JupyterLab and nbclient see it;
* ``execute_result`` and ``error`` are stored as nbformat has them;
* text that is not valid Unicode (unpaired surrogates, which a kernel's JSON can escape) is stored
  as U+FFFD, and ``unencodable`` counts it.

Memory stays bounded whatever the kernel prints: past ``limit`` characters of stored text (streams
and errors) a cell keeps its start (``limit - tail`` characters), a notice saying how much was
dropped, and the last ``tail`` characters, however the text arrived (many small messages, or one
message far over the limit). Displays (``display_data``, ``execute_result``: images, HTML …) have
a budget of their own, ``display_limit``: a loop that draws a dozen plots keeps them all, as
Jupyter does, and a display past that budget is dropped whole, counted in the notice. Pure: no
I/O, no clock.
"""

from __future__ import annotations

import copy
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nbrelay.notebook.text import scrub

Msg = Mapping[str, Any]
Output = dict[str, Any]

_CR = re.compile(r"[^\n]*\r(?=[^\n])")
_BS = re.compile(r"[^\n]\x08")
_OUTPUT_TYPES = frozenset({"stream", "display_data", "execute_result", "error"})
# What a kernel's own output cap (kernels/local.py) puts where it cut a huge single write.
_KERNEL_CUT = re.compile(r"\n… \[([\d,]+) characters cut: over [\d,]+ printed at once\] …\n")
_KERNEL_CUT_TAIL = "printed at once] …"


def kernel_cut(text: str) -> tuple[int, int]:
    """Characters a kernel's output cap cut out of ``text`` (as its markers say), and the
    characters of those markers."""
    if _KERNEL_CUT_TAIL not in text:
        return 0, 0
    found = list(_KERNEL_CUT.finditer(text))
    return sum(int(m.group(1).replace(",", "")) for m in found), sum(len(m[0]) for m in found)


def msg_type_of(msg: Msg) -> str:
    kind = msg.get("msg_type") or (msg.get("header") or {}).get("msg_type")
    return str(kind or "")


def _parent_of(msg: Msg) -> str:
    return str((msg.get("parent_header") or {}).get("msg_id") or "")


def _display_id(content: Mapping[str, Any]) -> str | None:
    transient = content.get("transient")
    value = transient.get("display_id") if isinstance(transient, Mapping) else None
    return str(value) if value else None


def terminal_text(text: str) -> str:
    """Apply carriage returns and backspaces the way a terminal shows them."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        text = _CR.sub("", text)
    while "\x08" in text:
        new = _BS.sub("", text)
        if new == text:
            text = text.replace("\x08", "")
            break
        text = new
    return text


@dataclass(frozen=True)
class Limits:
    """How much output one cell may store: ``limit`` characters of text in total, of which
    ``tail`` is kept from the end once the limit is passed (at most half the limit, for small
    limits); ``display_limit`` characters of displays."""

    limit: int = 1_000_000
    tail: int = 20_000
    display_limit: int = 50_000_000

    @property
    def kept_tail(self) -> int:
        """Characters kept from the end of a cut output."""
        return max(min(self.tail, self.limit // 2), 0)

    @property
    def kept_start(self) -> int:
        """Characters of text a cut output keeps from its start: the rest of the limit is the
        tail's."""
        return self.limit - self.kept_tail


def _size(output: Output) -> int:
    kind = output.get("output_type")
    if kind == "stream":
        return len(output.get("text", ""))
    if kind == "error":
        return sum(len(str(x)) for x in output.get("traceback") or []) + len(
            str(output.get("evalue", ""))
        )
    total = 0
    for value in (output.get("data") or {}).values():
        total += len(value) if isinstance(value, str) else len(str(value))
    return total


def _bundle(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items()}


class CellOutputs:
    """The outputs of one cell, built from its execution's messages (see the module docstring)."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self.execution_count: int | None = None
        self._outputs: list[Output] = []
        self._clear_pending = False
        self._displays: dict[str, list[int]] = {}
        self._stored = 0  # characters of text in _outputs
        self._shown = 0  # characters of displays in _outputs
        self._dropped = 0  # characters past the limit (the last ``tail`` of them are kept)
        self._dropped_outputs = 0  # displays past the display limit
        self._kernel_cut = 0  # characters the kernel's own cap cut before sending
        self._kernel_marks = 0  # characters of the markers it put there
        self._after: list[Output] = []  # errors that arrived past the limit (after the notice)
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self._tail_name = "stdout"
        self.printed = 0  # characters received in stream and text outputs, ever
        self.unencodable = 0  # unpaired surrogates the kernel sent, stored as U+FFFD
        # Output widgets capturing a request's outputs: its msg_id → their comm ids (the last
        # one captures, as widgets nest), and each capturing comm id → the msg_id.
        self._captures: dict[str, list[str]] = {}
        self._capturing: dict[str, str] = {}
        self.captured = 0  # outputs that went to an Output widget instead of the cell

    # -- reading --------------------------------------------------------------------------

    @property
    def truncated(self) -> bool:
        return self._dropped > 0 or self._dropped_outputs > 0

    def outputs(self) -> list[Output]:
        """The nbformat outputs as they stand (a new list; output dicts are copies)."""
        out = [copy.deepcopy(o) for o in self._outputs]
        if self.truncated:
            out.append(self._notice())
        out.extend(copy.deepcopy(o) for o in self._after)
        return out

    def _kept_tail(self) -> str:
        """The last ``kept_tail`` characters of the text past the start, as received."""
        joined = "".join(self._tail)
        return joined[len(joined) - self.limits.kept_tail :] if joined else ""

    def _notice(self) -> Output:
        """What was dropped, counted in full: displays past their budget, characters past the
        start that are not in the kept tail, characters the kernel's own cap cut from single
        huge writes."""
        shown = ""
        if self._dropped_outputs:
            n = self._dropped_outputs
            shown = (
                f"\n… [{n:,} display{'s' if n != 1 else ''} (images, HTML …) dropped: past the "
                f"{self.limits.display_limit:,} characters of displays stored per cell] …\n"
            )
        if not self._dropped:
            return {"output_type": "stream", "name": "stderr", "text": shown}
        parts = []
        raw_tail = self._kept_tail()
        dropped = self._dropped - len(raw_tail) + self._kernel_cut
        if self._kernel_marks:  # the markers are not output: those not kept don't count
            kept = [str(o.get("text", "")) for o in self._outputs if o["output_type"] == "stream"]
            kept.append(raw_tail)
            dropped -= self._kernel_marks - sum(kernel_cut(t)[1] for t in kept)
        if dropped > 0:
            part = f"{dropped:,} characters"
            if self._kernel_cut:
                part += (
                    f" ({self._kernel_cut:,} of them cut by the kernel from writes too big to send)"
                )
            parts.append(part)
        tail = terminal_text(raw_tail)
        what = f"{' and '.join(parts)} dropped" if parts else "nothing dropped"
        follows = f"; the last {len(tail):,} characters follow" if tail else ""
        text = (
            f"{shown}\n… [output past the {self.limits.limit:,}-character limit stored per cell: "
            f"{what}{follows}] …\n{tail}"
        )
        return {"output_type": "stream", "name": self._tail_name, "text": text}

    def display_indexes(self, display_id: str) -> list[int]:
        return list(self._displays.get(display_id, ()))

    # -- folding --------------------------------------------------------------------------

    def feed(self, msg: Msg) -> bool:
        """Fold one IOPub message in; return whether the outputs changed."""
        kind = msg_type_of(msg)
        content, replaced = scrub(msg.get("content") or {})
        self.unencodable += replaced
        if kind == "execute_input":
            count = content.get("execution_count")
            if isinstance(count, int):
                self.execution_count = count
            return False
        if kind == "comm_msg":
            self._widget_state(content)
            return False
        if kind == "update_display_data":
            display_id = _display_id(content)
            return self.update_display(display_id, content) if display_id else False
        if kind not in _OUTPUT_TYPES and kind != "clear_output":
            return False
        display_id = _display_id(content)
        # A new output with a display id also updates the ones shown before (nbclient and
        # JupyterLab do so even when an Output widget captures the new one).
        updated = (
            display_id is not None
            and kind in ("display_data", "execute_result")
            and self.update_display(display_id, content)
        )
        if self._captures.get(_parent_of(msg)):
            # Inside ``with output_widget:``: the widget shows it, the cell does not.
            self.captured += kind != "clear_output"
            return updated
        if kind == "clear_output":
            if content.get("wait"):
                self._clear_pending = True
                return False
            return self._clear()
        if self._clear_pending:
            self._clear_pending = False
            self._clear()
        if kind == "stream":
            return self._stream(str(content.get("name", "stdout")), str(content.get("text", "")))
        output = self._output(kind, content)
        if kind == "execute_result" and isinstance(output.get("execution_count"), int):
            self.execution_count = output["execution_count"]
        size = _size(output)
        self.printed += size
        if kind == "error":
            if self._dropped or self._after or self._stored + size > self.limits.limit:
                # The error is what the agent needs most: keep it, after the notice.
                self._after.append(output)
            else:
                self._outputs.append(output)
                self._stored += size
            return True
        if self._shown + size > self.limits.display_limit:
            self._dropped_outputs += 1
            return True
        # A display is kept past the text's limit too (before the notice: it stays updatable).
        self._outputs.append(output)
        self._shown += size
        if display_id:
            self._displays.setdefault(display_id, []).append(len(self._outputs) - 1)
        return True

    def _widget_state(self, content: Mapping[str, Any]) -> None:
        """An Output widget starts or stops capturing a request's outputs (its ``msg_id``);
        only Output widgets have that state key."""
        data = content.get("data")
        state = data.get("state") if isinstance(data, Mapping) else None
        comm_id = str(content.get("comm_id") or "")
        if not isinstance(state, Mapping) or "msg_id" not in state or not comm_id:
            return
        previous = self._capturing.pop(comm_id, None)
        stack = self._captures.get(previous or "", [])
        if comm_id in stack:
            del stack[len(stack) - 1 - stack[::-1].index(comm_id)]  # where it was pushed last
        msg_id = state.get("msg_id")
        if isinstance(msg_id, str) and msg_id:
            self._captures.setdefault(msg_id, []).append(comm_id)
            self._capturing[comm_id] = msg_id

    def update_display(self, display_id: str, content: Mapping[str, Any]) -> bool:
        """Replace the data of every output shown with ``display_id``; False if there is none."""
        found = False
        for k in self._displays.get(display_id, ()):
            if k < len(self._outputs):
                old = self._outputs[k]
                new = dict(old)
                new["data"] = _bundle(content.get("data"))
                new["metadata"] = dict(content.get("metadata") or {})
                self._shown += _size(new) - _size(old)
                self._outputs[k] = new
                found = True
        return found

    def _clear(self) -> bool:
        had = bool(self._outputs or self._after) or self.truncated
        self._outputs = []
        self._displays = {}
        self._stored = 0
        self._shown = 0
        self._dropped = 0
        self._dropped_outputs = 0
        self._kernel_cut = 0
        self._kernel_marks = 0
        self._after = []
        self._tail.clear()
        self._tail_len = 0
        return had

    @staticmethod
    def _output(kind: str, content: Mapping[str, Any]) -> Output:
        if kind == "error":
            return {
                "output_type": "error",
                "ename": str(content.get("ename", "Error")),
                "evalue": str(content.get("evalue", "")),
                "traceback": [str(x) for x in content.get("traceback") or []],
            }
        out: Output = {
            "output_type": kind,
            "data": _bundle(content.get("data")),
            "metadata": dict(content.get("metadata") or {}),
        }
        if kind == "execute_result":
            count = content.get("execution_count")
            out["execution_count"] = count if isinstance(count, int) else None
        return out

    def _stream(self, name: str, text: str) -> bool:
        self.printed += len(text)
        if not text:
            return False
        cut, marks = kernel_cut(text)
        self._kernel_cut += cut
        self._kernel_marks += marks
        if self._dropped:
            self._add_tail(name, text)
            return True
        last = self._outputs[-1] if self._outputs else None
        if last is not None and last.get("output_type") == "stream" and last.get("name") == name:
            old = str(last.get("text", ""))
            merged = terminal_text(old + text)
            before = self._stored - len(old)  # stored text of the outputs before this one
            if before + len(merged) <= self.limits.limit:
                last["text"] = merged
                self._stored = before + len(merged)
                return True
            # Past the limit: the start keeps what leaves the tail its room, the rest is tail.
            keep = max(self.limits.kept_start - before, 0)
            if keep:
                last["text"] = merged[:keep]
            else:
                self._outputs.pop()  # a stream: no display index points at it
            self._stored = before + keep
            self._add_tail(name, merged[keep:])
            return True
        text = terminal_text(text)
        if self._stored + len(text) <= self.limits.limit:
            self._outputs.append({"output_type": "stream", "name": name, "text": text})
            self._stored += len(text)
            return True
        keep = max(self.limits.kept_start - self._stored, 0)
        if keep:
            self._outputs.append({"output_type": "stream", "name": name, "text": text[:keep]})
            self._stored += keep
        self._add_tail(name, text[keep:])
        return True

    def _add_tail(self, name: str, text: str) -> None:
        """Take text past the start: count it as dropped, and keep (at least) its last
        ``kept_tail`` characters (amortised: the deque is joined only when it doubles)."""
        self._tail_name = name
        self._tail.append(text)
        self._tail_len += len(text)
        self._dropped += len(text)
        keep = self.limits.kept_tail
        while self._tail and self._tail_len - len(self._tail[0]) >= keep:
            self._tail_len -= len(self._tail.popleft())
        if self._tail_len > 2 * keep and self._tail:
            joined = "".join(self._tail)
            joined = joined[len(joined) - keep :] if keep else ""
            self._tail.clear()
            self._tail.append(joined)
            self._tail_len = len(joined)


class RunOutputs:
    """The outputs of the cells of one run, so that ``update_display_data`` sent while one cell
    runs can update a display shown by an earlier cell of the same run."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self.cells: dict[str, CellOutputs] = {}

    def cell(self, key: str) -> CellOutputs:
        found = self.cells.get(key)
        if found is None:
            found = self.cells[key] = CellOutputs(self.limits)
        return found

    def feed(self, key: str, msg: Msg) -> set[str]:
        """Fold a message of cell ``key``'s execution; return the keys of the cells it changed."""
        kind = msg_type_of(msg)
        changed: set[str] = set()
        if kind in ("update_display_data", "display_data", "execute_result"):
            content, _ = scrub(msg.get("content") or {})
            display_id = _display_id(content)
            if kind == "update_display_data":
                return (
                    {k for k, c in self.cells.items() if c.update_display(display_id, content)}
                    if display_id
                    else set()
                )
            if display_id:  # the cell's own displays are updated by its fold
                changed = {
                    k
                    for k, c in self.cells.items()
                    if k != key and c.update_display(display_id, content)
                }
        if self.cell(key).feed(msg):
            changed.add(key)
        return changed


def fold(messages: Iterable[Msg], limits: Limits = Limits()) -> list[Output]:
    """The outputs a sequence of one cell's IOPub messages produces."""
    cell = CellOutputs(limits)
    for msg in messages:
        cell.feed(msg)
    return cell.outputs()
