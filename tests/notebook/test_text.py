"""Unpaired surrogates (from JSON escapes) become U+FFFD wherever notebook text is read."""

from __future__ import annotations

import json

from nbrelay.notebook.model import parse, serialize
from nbrelay.notebook.outputs import fold
from nbrelay.notebook.text import clean_text, may_hold_surrogates, scrub


def test_scrub_replaces_every_surrogate_and_counts_them() -> None:
    value = {"a": ["ok", "x\ud800y\udfff"], "\udc00k": 1, "n": None}
    cleaned, n = scrub(value)
    assert n == 3
    assert cleaned == {"a": ["ok", "x\ufffdy\ufffd"], "\ufffdk": 1, "n": None}
    json.dumps(cleaned, ensure_ascii=False).encode("utf-8")  # encodable now
    same = {"a": ["ok"]}
    assert scrub(same) == (same, 0)
    assert scrub(same)[0] is same
    assert clean_text("plain") == "plain"
    assert clean_text("\ud83d!") == "\ufffd!"


def test_the_bytes_test_finds_every_surrogate_escape() -> None:
    for escape in ("\\ud800", "\\uDBFF", "\\udc00", "\\uDfFf"):
        assert may_hold_surrogates(f'"{escape}"'.encode())
    assert not may_hold_surrogates(b'"\\u00e9 \\ud7ff \\ue000"')


def test_a_notebook_with_lone_surrogates_parses_to_text_that_can_be_written() -> None:
    raw = (
        b'{"cells": [{"cell_type": "code", "execution_count": null, "id": "a1", "metadata": {},'
        b' "outputs": [], "source": "x = 1  # \\ud800"}], "metadata": {}, "nbformat": 4,'
        b' "nbformat_minor": 5}'
    )
    nb = parse(raw)
    assert nb.cells[0]["source"] == "x = 1  # \ufffd"
    assert nb.replaced == 1
    assert "cell 0 (id 'a1')" in nb.problems[0]
    assert "x = 1  # \ufffd" in serialize(nb).decode("utf-8")


def test_kernel_messages_with_lone_surrogates_fold_to_u_fffd() -> None:
    messages = [
        {"msg_type": "stream", "content": {"name": "stdout", "text": "a\ud800\n"}},
        {"msg_type": "display_data", "content": {"data": {"text/plain": "\udfff"}}},
    ]
    outputs = fold(messages)
    assert outputs[0]["text"] == "a\ufffd\n"
    assert outputs[1]["data"]["text/plain"] == "\ufffd"
