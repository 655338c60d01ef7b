"""What agents read: bounded text, images as placeholders, readable tables and tracebacks."""

from __future__ import annotations

import base64
import struct
import zlib

from nbrelay.notebook import render
from tests.helpers import code


def _png(w: int, h: int) -> str:
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))

    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(png).decode()


def test_truncate_middle_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    text = "".join(f"line {i}\n" for i in range(10_000))
    shown, cut = render.truncate_middle(text, 300, hint="read_output for the rest")
    assert shown.startswith("line 0\n")
    assert shown.rstrip().endswith("line 9999")
    assert cut == len(text) - 300
    assert f"[{cut:,} characters cut; read_output for the rest]" in shown


def test_carriage_returns_and_ansi_collapse_like_a_terminal() -> None:
    bar = "\x1b[32m 10%\x1b[0m\r 50%\r100%\ndone\n"
    assert render.collapse_cr(render.strip_ansi(bar)) == "100%\ndone\n"
    assert render.collapse_cr("abc\b\bX") == "aX"


def test_error_outputs_become_clean_tracebacks() -> None:
    out = {
        "output_type": "error",
        "ename": "ZeroDivisionError",
        "evalue": "division by zero",
        "traceback": [
            "\x1b[0;31mZeroDivisionError\x1b[0m Traceback",
            "----> 1 1/0",
            "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero",
        ],
    }
    text = render.output_text(out).text
    assert "\x1b" not in text
    assert text.endswith("ZeroDivisionError: division by zero")


def test_images_are_described_not_inlined() -> None:
    out = {
        "output_type": "display_data",
        "data": {"image/png": _png(64, 32), "text/plain": "<Figure size 640x480 with 1 Axes>"},
        "metadata": {},
    }
    ot = render.output_text(out)
    assert ot.image == "image/png"
    assert ot.text.startswith("[image/png 64x32, ")


def test_html_only_tables_get_a_readable_text_form() -> None:
    html = "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table><style>x{}</style>"
    out = {
        "output_type": "execute_result",
        "data": {"text/html": html},
        "metadata": {},
        "execution_count": 1,
    }
    assert render.output_text(out).text == "a | b\n1 | 2"


def test_budget_is_shared_fairly_across_a_cells_outputs() -> None:
    cell = code(
        "x",
        "c0",
        outputs=[
            {"output_type": "stream", "name": "stdout", "text": "a" * 5000},
            {"output_type": "stream", "name": "stdout", "text": "note\n"},
            {"output_type": "stream", "name": "stdout", "text": "b" * 4000 + "THE END"},
        ],
    )
    views = render.render_outputs(cell, render.Budget(remaining=1200, per_output=1200))
    assert views[1]["text"] == "note\n"
    assert views[0]["cut"] > 0
    assert views[2]["cut"] > 0
    assert views[2]["text"].endswith("THE END"), "the end of the last output is always shown"
    assert sum(len(v["text"]) for v in views) <= 1200 + 2 * 80  # plus the two cut markers
    views = render.render_outputs(cell, render.Budget(remaining=0, per_output=600))
    assert views[0]["omitted"] == "5,000 characters not shown (output budget used)"


def test_fair_shares_give_short_texts_all_they_need() -> None:
    assert render.fair_shares([1_000_000, 80, 20_000], 6000, 6000) == [2960, 80, 2960]
    assert render.fair_shares([10, 10], 100, 100) == [10, 10]
    assert render.fair_shares([5000, 5000], 100_000, 1000) == [1000, 1000]


def test_output_summary_is_one_short_line() -> None:
    cell = code(
        "x", "c0", outputs=[{"output_type": "stream", "name": "stdout", "text": "hello\nworld\n"}]
    )
    assert render.outputs_summary(cell) == "[1 output] hello"
