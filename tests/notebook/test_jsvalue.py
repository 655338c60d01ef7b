"""Deno's printed values read as data (the srcbook profile's cell_visualize of a TS cell)."""

from __future__ import annotations

from typing import Any

import pytest

from nbrelay.notebook.jsvalue import js_literal


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (
            '[ { month: "Oct", revenue: 125000 }, { month: "Nov", revenue: 1.5e3 } ]',
            [{"month": "Oct", "revenue": 125000}, {"month": "Nov", "revenue": 1500.0}],
        ),
        (
            "{ 'a b': 'it\\'s', c: [ true, false, null, undefined ], d: -2, e: 10n }",
            {"a b": "it's", "c": [True, False, None, None], "d": -2, "e": 10},
        ),
        ('"plain"', "plain"),
        (r"""[ `say "hi"`, 'it\'s', "tab\\there" ]""", ['say "hi"', "it's", "tab\\there"]),
        ("[]", []),
    ],
)
def test_js_literals_are_read_as_data(text: str, value: Any) -> None:
    assert js_literal(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "[Function: f]",
        "Map(1) { 1 => 2 }",
        "[ 1, 2, ... 98 more items ]",
        "{ a: 1",
        "fetch('x')",
        "`${secret}`",
        "{ a: [Object] }",
        "2024-01-01T00:00:00.000Z",
    ],
)
def test_anything_but_data_is_refused(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"unexpected|not data|not closed|ends early|more than one"
    ):
        js_literal(text)
