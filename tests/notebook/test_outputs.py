"""The pure fold from kernel messages to nbformat outputs, over recorded message sequences."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import nbformat
import pytest

from nbrelay.notebook.outputs import CellOutputs, Limits, RunOutputs, fold, terminal_text


def msg(kind: str, **content: Any) -> dict[str, Any]:
    """A message as jupyter_client hands it over (only the fields the fold reads)."""
    return {"header": {"msg_type": kind}, "msg_type": kind, "content": content}


def out(text: str, name: str = "stdout") -> dict[str, Any]:
    return msg("stream", name=name, text=text)


def display(data: dict[str, Any], display_id: str | None = None) -> dict[str, Any]:
    transient = {"display_id": display_id} if display_id else {}
    return msg("display_data", data=data, metadata={}, transient=transient)


def valid(outputs: list[dict[str, Any]]) -> None:
    cell = nbformat.v4.new_code_cell("x", outputs=[nbformat.from_dict(o) for o in outputs])
    nb = nbformat.v4.new_notebook(cells=[cell])
    nbformat.validate(nb)


def test_consecutive_streams_of_one_name_merge() -> None:
    outputs = fold([out("a\n"), out("b\n"), out("e\n", "stderr"), out("c\n")])
    assert outputs == [
        {"output_type": "stream", "name": "stdout", "text": "a\nb\n"},
        {"output_type": "stream", "name": "stderr", "text": "e\n"},
        {"output_type": "stream", "name": "stdout", "text": "c\n"},
    ]
    valid(outputs)


def test_carriage_returns_collapse_like_a_progress_bar() -> None:
    chunks = ["  0%\r", " 50%\r", "100%\r", "\ndone\n"]
    assert fold([out(c) for c in chunks])[0]["text"] == "100%\ndone\n"
    # A trailing carriage return waits for the next chunk to overwrite the line.
    assert fold([out("10%\r")])[0]["text"] == "10%\r"
    assert terminal_text("abc\x08\x08d\n") == "ad\n"
    assert terminal_text("a\r\nb") == "a\nb"


def test_ansi_colours_are_kept_in_stored_outputs() -> None:
    assert fold([out("\x1b[31mred\x1b[0m\n")])[0]["text"] == "\x1b[31mred\x1b[0m\n"


def test_clear_output_now_and_clear_output_wait() -> None:
    assert fold([out("old\n"), msg("clear_output", wait=False)]) == []
    # wait=True keeps the old output until the next one arrives.
    cell = CellOutputs()
    cell.feed(out("frame 1\n"))
    cell.feed(msg("clear_output", wait=True))
    assert cell.outputs()[0]["text"] == "frame 1\n"
    cell.feed(out("frame 2\n"))
    assert cell.outputs() == [{"output_type": "stream", "name": "stdout", "text": "frame 2\n"}]


def test_update_display_data_replaces_the_display_wherever_it_was_shown() -> None:
    run = RunOutputs()
    assert run.feed("c1", display({"text/plain": "0%"}, "bar")) == {"c1"}
    assert run.feed("c2", out("working\n")) == {"c2"}
    changed = run.feed(
        "c2",
        msg(
            "update_display_data",
            data={"text/plain": "100%"},
            metadata={},
            transient={"display_id": "bar"},
        ),
    )
    assert changed == {"c1"}
    assert run.cell("c1").outputs() == [
        {"output_type": "display_data", "data": {"text/plain": "100%"}, "metadata": {}}
    ]
    assert (
        run.feed("c2", msg("update_display_data", data={}, transient={"display_id": "x"})) == set()
    )


def update(data: dict[str, Any], display_id: str) -> dict[str, Any]:
    return msg("update_display_data", data=data, metadata={}, transient={"display_id": display_id})


def test_a_display_update_reaches_an_execute_result_and_a_new_display_the_old_ones() -> None:
    run = RunOutputs()
    result = msg(
        "execute_result",
        data={"text/plain": "9"},
        metadata={},
        execution_count=5,
        transient={"display_id": "result"},
    )
    run.feed("c1", display({"text/plain": "1"}, "here"))
    run.feed("c1", result)
    assert run.feed("c2", update({"text/plain": "10"}, "result")) == {"c1"}
    assert run.cell("c1").outputs()[1] == {
        "output_type": "execute_result",
        "data": {"text/plain": "10"},
        "metadata": {},
        "execution_count": 5,
    }
    # Showing a display id again updates every output shown with it before, in any cell.
    assert run.feed("c2", display({"text/plain": "2"}, "here")) == {"c1", "c2"}
    assert run.cell("c1").outputs()[0]["data"] == {"text/plain": "2"}
    assert [o["data"] for o in run.cell("c2").outputs()] == [{"text/plain": "2"}]
    valid(run.cell("c1").outputs())


def parented(message: dict[str, Any], request: str = "req-1") -> dict[str, Any]:
    return {**message, "parent_header": {"msg_id": request}}


def widget_capture(comm_id: str, request: str) -> dict[str, Any]:
    """An ipywidgets Output widget's state change: ``msg_id`` set on entering ``with out:``,
    emptied on leaving it."""
    state = {"method": "update", "state": {"msg_id": request}, "buffer_paths": []}
    return parented(msg("comm_msg", comm_id=comm_id, data=state))


def test_what_an_output_widget_captures_stays_out_of_the_cell() -> None:
    cell = CellOutputs()
    for message in [
        out("hi4\n"),
        widget_capture("w1", "req-1"),
        out("hello world\n"),
        msg("clear_output", wait=False),  # out.clear_output(): the widget's, not the cell's
        display({"text/plain": "in the widget"}),
        widget_capture("w1", ""),
    ]:
        cell.feed(parented(message))
    assert cell.outputs() == [{"output_type": "stream", "name": "stdout", "text": "hi4\n"}]
    assert cell.captured == 2
    # Nested widgets: the innermost captures; after both leave, output is the cell's again.
    for message in [
        widget_capture("inner", "req-1"),
        widget_capture("outer", "req-1"),
        out("in outer\n"),
        widget_capture("outer", ""),
        out("also in inner\n"),
        msg("error", ename="ValueError", evalue="shown in the widget", traceback=[]),
        widget_capture("inner", ""),
        out("after\n"),
    ]:
        cell.feed(parented(message))
    assert cell.outputs() == [{"output_type": "stream", "name": "stdout", "text": "hi4\nafter\n"}]
    # A widget capturing another request does not take this one's output.
    cell.feed(widget_capture("w2", "req-other"))
    cell.feed(parented(out("mine\n")))
    assert cell.outputs()[-1]["text"].endswith("mine\n")
    # Other widgets' state (no msg_id key) changes nothing.
    cell.feed(parented(msg("comm_msg", comm_id="w3", data={"state": {"value": 1}})))
    cell.feed(parented(out("still mine\n")))
    assert cell.outputs()[-1]["text"].endswith("still mine\n")


def test_execute_result_and_error_are_stored_as_nbformat_has_them() -> None:
    cell = CellOutputs()
    cell.feed(msg("execute_input", code="1", execution_count=7))
    cell.feed(msg("execute_result", data={"text/plain": "1"}, metadata={}, execution_count=7))
    cell.feed(msg("error", ename="ValueError", evalue="bad", traceback=["tb 1", "tb 2"]))
    cell.feed(msg("status", execution_state="idle"))
    assert cell.execution_count == 7
    outputs = cell.outputs()
    assert outputs == [
        {
            "output_type": "execute_result",
            "data": {"text/plain": "1"},
            "metadata": {},
            "execution_count": 7,
        },
        {
            "output_type": "error",
            "ename": "ValueError",
            "evalue": "bad",
            "traceback": ["tb 1", "tb 2"],
        },
    ]
    valid(outputs)


def test_an_output_flood_keeps_the_start_a_notice_and_the_end() -> None:
    cell = CellOutputs(Limits(limit=1000, tail=100))
    for i in range(10_000):
        cell.feed(out(f"line {i:05d} " + "x" * 40 + "\n"))
    outputs = cell.outputs()
    assert len(outputs) == 2
    head, notice = outputs[0]["text"], outputs[1]["text"]
    assert len(head) == 900  # the limit less the tail's room
    assert head.startswith("line 00000 ")
    assert notice.startswith("\n… [output past the 1,000-character limit stored per cell: ")
    assert "characters dropped; the last 100 characters follow] …\n" in notice
    assert notice.endswith("line 09999 " + "x" * 40 + "\n")
    assert len(notice) < 400
    # A plot drawn after the flood is kept (displays have their own budget), before the notice.
    cell.feed(display({"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}))
    assert [o["output_type"] for o in cell.outputs()] == ["stream", "display_data", "stream"]
    # an error still gets through: it is what the agent needs most
    cell.feed(msg("error", ename="E", evalue="v", traceback=[]))
    kinds = [o["output_type"] for o in cell.outputs()]
    assert kinds == ["stream", "display_data", "stream", "error"]
    valid(cell.outputs())
    assert cell.printed > 500_000


PNG = "iVBORw0KGgo" + "A" * 120_000  # a 90 KB plot, as base64


def test_a_dozen_plots_are_all_kept_and_displays_past_their_budget_are_dropped_whole() -> None:
    """Twelve 90 KB figures in one cell (a loop over columns): Jupyter keeps them all. They
    shared the text's 1,000,000 characters, and five were dropped."""
    cell = CellOutputs(Limits())
    for i in range(12):
        cell.feed(out(f"column {i}\n"))
        cell.feed(display({"image/png": PNG, "text/plain": f"<Figure {i}>"}))
    outputs = cell.outputs()
    figures = [o for o in outputs if o["output_type"] == "display_data"]
    assert [f["data"]["text/plain"] for f in figures] == [f"<Figure {i}>" for i in range(12)]
    assert not cell.truncated
    valid(outputs)
    # Past the displays' own budget a display is dropped whole, counted; text goes on.
    small = CellOutputs(Limits(display_limit=300_000))
    for i in range(4):
        small.feed(display({"image/png": PNG, "text/plain": f"<Figure {i}>"}))
        small.feed(out(f"after {i}\n"))
    outputs = small.outputs()
    kept = [o["data"]["text/plain"] for o in outputs if o["output_type"] == "display_data"]
    assert kept == ["<Figure 0>", "<Figure 1>"]
    texts = [o["text"] for o in outputs if o["output_type"] == "stream"]
    assert "after 3\n" in "".join(texts)  # printed text after a dropped display is kept
    assert texts[-1] == (
        "\n… [2 displays (images, HTML …) dropped: past the 300,000 characters of displays "
        "stored per cell] …\n"
    )
    valid(outputs)
    # An update that replaces a display keeps the budget right (a live plot redrawn in place).
    live = CellOutputs(Limits(display_limit=300_000))
    live.feed(display({"image/png": PNG}, display_id="d"))
    for _ in range(10):
        live.update_display("d", {"data": {"image/png": PNG}, "metadata": {}})
    live.feed(display({"image/png": PNG}))
    assert [o["output_type"] for o in live.outputs()] == ["display_data", "display_data"]


NOTICE = re.compile(
    r"\n… \[output past the [\d,]+-character limit stored per cell: ([\d,]+) characters"
    r"(?: \(([\d,]+) of them cut by the kernel[^)]*\))? dropped; "
    r"the last ([\d,]+) characters follow\] …\n"
)


def kernel_capped(text: str, limits: Limits) -> str:
    """What the kernel's output cap (kernels/launch.py) sends of one flush of ``text``."""
    if len(text) <= limits.limit:
        return text
    cut = len(text) - limits.kept_start - limits.kept_tail
    end = text[len(text) - limits.kept_tail :]
    return (
        text[: limits.kept_start]
        + f"\n… [{cut:,} characters cut: over {limits.limit:,} printed at once] …\n"
        + end
    )


def lines(count: int, width: int) -> Iterator[str]:
    for i in range(count):
        yield str(i).rjust(width - 1, "x") + "\n"


def check_start_notice_and_end(outputs: list[dict[str, Any]], printed: str, limits: Limits) -> None:
    """The start of what was printed, a notice counting exactly what is not kept, and the last
    ``kept_tail`` characters printed (docs/running-code.md's promise)."""
    assert [o["output_type"] for o in outputs] == ["stream", "stream"]
    start, rest = outputs[0]["text"], outputs[1]["text"]
    notice = NOTICE.match(rest)
    assert notice is not None, rest[:300]
    tail = rest[notice.end() :]
    assert start == printed[: limits.kept_start]
    assert tail == printed[len(printed) - limits.kept_tail :]
    assert int(notice[3].replace(",", "")) == limits.kept_tail
    assert int(notice[1].replace(",", "")) == len(printed) - len(start) - len(tail)


# (lines, characters per line, how the kernel sends them): 1.2 MB in 12,000 fast lines, which
# a kernel sends as one flush (capped by nbrelay's kernel cap, or whole by a kernel without it)
# or in many messages; and 1 MB lines past a 1,000,000-character limit.
SHAPES = [
    (12_000, 100, "one capped flush"),
    (12_000, 100, "one flush"),
    (12_000, 100, "a message per line"),
    (120, 10_000, "a message per line"),
    (30, 1_000_000, "capped flush per line"),
]


@pytest.mark.parametrize(("count", "width", "sent"), SHAPES)
def test_a_cut_output_keeps_the_last_characters_however_they_arrive(
    count: int, width: int, sent: str
) -> None:
    limits = Limits()
    printed = "".join(lines(count, width))
    if sent == "one capped flush":
        messages = [kernel_capped(printed, limits)]
    elif sent == "one flush":
        messages = [printed]
    elif sent == "capped flush per line":
        messages = [kernel_capped(line, limits) for line in lines(count, width)]
    else:
        messages = list(lines(count, width))
    cell = CellOutputs(limits)
    for text in messages:
        cell.feed(out(text))
    check_start_notice_and_end(cell.outputs(), printed, limits)
    valid(cell.outputs())


def test_a_gigabyte_in_megabyte_lines_keeps_the_last_20000_characters() -> None:
    """1 GB printed in 1 MB lines kept 68 characters of its end: each line arrived as a
    message just over the limit, and only what lay past the stored start was kept."""
    limits = Limits()
    cell = CellOutputs(limits)
    last = ""
    for line in lines(1000, 1_000_001):
        cell.feed(out(line))
        last = line
    outputs = cell.outputs()
    start, rest = outputs[0]["text"], outputs[1]["text"]
    notice = NOTICE.match(rest)
    assert notice is not None
    assert len(start) == limits.kept_start
    assert rest[notice.end() :] == last[-20_000:]
    assert int(notice[1].replace(",", "")) == 1000 * 1_000_001 - limits.limit
    assert cell.printed == 1000 * 1_000_001


def test_a_small_limit_keeps_half_of_it_as_the_tail() -> None:
    limits = Limits(limit=10_000)
    assert (limits.kept_start, limits.kept_tail) == (5_000, 5_000)
    printed = "".join(lines(1000, 50))
    cell = CellOutputs(limits)
    cell.feed(out(printed))
    check_start_notice_and_end(cell.outputs(), printed, limits)


def test_clear_output_resets_a_flooded_cell() -> None:
    cell = CellOutputs(Limits(limit=100, tail=10))
    cell.feed(out("y" * 500))
    assert cell.truncated
    cell.feed(msg("clear_output", wait=False))
    cell.feed(out("fresh\n"))
    assert cell.outputs() == [{"output_type": "stream", "name": "stdout", "text": "fresh\n"}]


def test_messages_that_are_not_outputs_change_nothing() -> None:
    cell = CellOutputs()
    for kind in ("status", "execute_input", "comm_open", "comm_msg"):
        assert not cell.feed(msg(kind, execution_state="busy"))
    assert cell.outputs() == []
