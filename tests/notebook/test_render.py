"""What agents read: bounded text, images as placeholders, readable tables and tracebacks."""

from __future__ import annotations

import base64
import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

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
    assert views[0]["omitted"] == "5,000 characters not shown (output budget 0)"


def test_fair_shares_give_short_texts_all_they_need() -> None:
    assert render.fair_shares([1_000_000, 80, 20_000], 6000, 6000) == [2960, 80, 2960]
    assert render.fair_shares([10, 10], 100, 100) == [10, 10]
    assert render.fair_shares([5000, 5000], 100_000, 1000) == [1000, 1000]


def test_output_summary_is_one_short_line() -> None:
    cell = code(
        "x", "c0", outputs=[{"output_type": "stream", "name": "stdout", "text": "hello\nworld\n"}]
    )
    assert render.outputs_summary(cell) == "[1 output] hello"


def _stream(text: str) -> dict[str, object]:
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_one_flood_leaves_every_later_output_whole() -> None:
    """After a 50,000-line print, twenty cells printing one short line each are all shown
    whole; the flood gets the rest of the budget (head and tail)."""
    flood = "".join(f"line {i}\n" for i in range(50_000))
    cells = [code("x", "c0", outputs=[_stream(flood)])]
    cells += [code("y", f"c{i}", outputs=[_stream(f"cell {i} ok\n")]) for i in range(1, 21)]
    rendered = render.render_many(cells, render.Budget(remaining=6000, per_output=6000))
    assert [r[0]["text"] for r in rendered[1:]] == [f"cell {i} ok\n" for i in range(1, 21)]
    assert all("omitted" not in r[0] and "cut" not in r[0] for r in rendered[1:])
    big = rendered[0][0]
    assert big["text"].startswith("line 0\n")
    assert big["text"].rstrip().endswith("line 49999")
    assert sum(len(r[0]["text"]) for r in rendered) <= 6000 + 100  # plus the one cut marker


def test_a_notice_never_costs_more_than_the_text_it_hides() -> None:
    text = "x" * 1000
    shown, cut = render.truncate_middle(text, 990, hint="read_output for the rest")
    assert (shown, cut) == (text, 0), "10 hidden characters do not deserve a 40-character notice"
    shown, cut = render.truncate_middle(text, 500, hint="read_output for the rest")
    assert cut == 500
    assert len(shown) - 500 < cut


@given(
    st.lists(st.integers(0, 20_000), max_size=30),
    st.integers(1, 20_000),
    st.integers(1, 8000),
)
def test_allocation_gives_every_output_its_head_and_shares_the_rest(
    lengths: list[int], total: int, cap: int
) -> None:
    shares = render.allocate(lengths, total, cap)
    head = min(render.HEAD, cap)
    for n, s in zip(lengths, shares, strict=True):
        assert min(n, head) <= s <= n  # at least its head (short texts whole), never more
        assert s == n or n - s > render.NOTICE  # a cut always hides more than a notice costs
        if s < n:
            assert s <= cap
    whole = [n for n in lengths if n <= head]
    assert all(s == n for n, s in zip(lengths, shares, strict=True) if n in whole)
    # Within the budget, beyond the heads and the small overshoots of whole-instead-of-cut.
    assert sum(shares) <= max(total, sum(min(n, head) for n in lengths)) + render.NOTICE * len(
        lengths
    )
    # Nothing is cut while the budget has room for it.
    if sum(min(n, cap) for n in lengths) <= total:
        assert shares == [n if n <= cap or n - cap <= render.NOTICE else cap for n in lengths]
    # Fair: every text that is cut (and not at the cap) gets the same share, give or take one.
    cut = [s for n, s in zip(lengths, shares, strict=True) if s < n and s < cap]
    if cut:
        assert max(cut) - min(cut) <= 1


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=20), st.integers(1, 8000))
def test_sharing_over_several_calls_matches_sharing_at_once(lengths: list[int], total: int) -> None:
    """``Budget.share`` builds a result from take() calls one by one with the shares the texts
    would get if all were fitted at once."""
    texts = ["y" * n for n in lengths]
    at_once = render.Budget(total, total).take_all(texts, "h")
    one_by_one = render.Budget(total, total).share(lambda b: [b.take(t, "h") for t in texts])
    assert one_by_one == at_once
