"""The notebook model: parsing, byte-exact serialisation, ids, versions."""

from __future__ import annotations

import json
from collections.abc import Callable

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook import nblr
from nbrelay.notebook.model import Notebook, new_cell, parse, serialize, version_of
from nbrelay.notebook.model import new_notebook as empty_notebook
from nbrelay.notebook.serialize import splice


def _nbformat_bytes() -> bytes:
    nb = new_notebook(
        cells=[
            new_markdown_cell("# Title\n\nsome *text* — ünïcode"),
            new_code_cell(
                "x = 1\nprint(x)\n",
                outputs=[
                    new_output("stream", name="stdout", text="1\n2\n"),
                    new_output(
                        "execute_result",
                        data={"text/plain": "a\nb", "application/json": {"k": [1, 2]}},
                        execution_count=3,
                    ),
                    new_output("error", ename="E", evalue="v", traceback=["l1", "l2"]),
                ],
                execution_count=3,
            ),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "P", "language": "python"}},
    )
    text: str = nbformat.writes(nb)
    return (text if text.endswith("\n") else text + "\n").encode()


def test_serialize_reproduces_nbformat_bytes_exactly() -> None:
    raw = _nbformat_bytes()
    assert serialize(parse(raw)) == raw


def test_parse_joins_multiline_strings_like_nbformat_reads() -> None:
    nb = parse(_nbformat_bytes())
    assert nb.cells[1]["source"] == "x = 1\nprint(x)\n"
    assert nb.cells[1]["outputs"][0]["text"] == "1\n2\n"
    assert nb.cells[1]["outputs"][1]["data"]["text/plain"] == "a\nb"
    assert nb.cells[1]["outputs"][1]["data"]["application/json"] == {"k": [1, 2]}


def test_version_is_a_hash_of_the_bytes() -> None:
    raw = _nbformat_bytes()
    assert version_of(raw) == version_of(bytes(raw))
    assert version_of(raw) != version_of(raw + b" ")
    assert len(version_of(raw)) == 16


def test_invalid_json_reports_line_and_column() -> None:
    with pytest.raises(NotebookInvalid) as info:
        parse(b'{\n "cells": [,\n}', name="bad.ipynb")
    assert "bad.ipynb is not valid JSON" in info.value.message
    assert "line 2, column 12" in info.value.message


def test_deep_nesting_is_a_clear_error_not_a_crash() -> None:
    deep = (
        b'{"nbformat": 4, "cells": [], "metadata": {"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
    )
    with pytest.raises(NotebookInvalid) as info:
        parse(deep)
    assert "nests JSON values too deeply" in info.value.message


def test_nbformat_3_is_read_as_nbformat_upgrades_it() -> None:
    v3 = {
        "metadata": {"name": "old"},
        "nbformat": 3,
        "nbformat_minor": 0,
        "worksheets": [
            {
                "cells": [
                    {"cell_type": "heading", "level": 1, "metadata": {}, "source": "Title"},
                    {
                        "cell_type": "code",
                        "collapsed": False,
                        "input": ["x = 1\n", "x"],
                        "language": "python",
                        "metadata": {},
                        "outputs": [],
                        "prompt_number": 3,
                    },
                ],
                "metadata": {},
            }
        ],
    }
    nb = parse(json.dumps(v3).encode(), name="old.ipynb")
    official = nbformat.reads(json.dumps(v3), as_version=4)
    assert [(c["cell_type"], c["source"]) for c in nb.cells] == [
        (c.cell_type, c.source) for c in official.cells
    ]
    assert nb.cells[1]["execution_count"] == 3
    assert nb.ids_made
    assert "nbformat 3" in nb.problems[0]
    written = nbformat.reads(serialize(nb).decode(), as_version=4)
    nbformat.validate(written)
    assert written.nbformat_minor == 5
    assert [c.id for c in written.cells] == nb.ids
    assert parse(json.dumps(v3).encode()).ids == nb.ids  # the same ids on every read


def test_a_notebook_nbformat_cannot_upgrade_is_refused_with_its_reason() -> None:
    with pytest.raises(NotebookInvalid) as info:
        parse(json.dumps({"nbformat": 3, "worksheets": []}).encode())
    assert "cannot upgrade" in info.value.message
    assert "metadata" in info.value.message


def test_non_utf8_bytes_are_refused() -> None:
    with pytest.raises(NotebookInvalid) as info:
        parse(b'{"cells": "\xff"}')
    assert "not UTF-8" in info.value.message


def test_notebook_4_4_gets_stable_ids_in_memory_and_4_5_on_write() -> None:
    nb44 = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": "a",
            },
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": "a",
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 4,
    }
    raw = json.dumps(nb44).encode()
    first, second = parse(raw), parse(raw)
    assert first.ids == second.ids
    assert len(set(first.ids)) == 2
    assert first.ids_made
    written = json.loads(serialize(first))
    assert written["nbformat_minor"] == 5
    assert [c["id"] for c in written["cells"]] == first.ids
    nbformat.validate(nbformat.reads(serialize(first).decode(), as_version=4))


def test_duplicated_ids_are_made_unique_in_memory_and_reported() -> None:
    cell = {"cell_type": "markdown", "id": "same", "metadata": {}, "source": "x"}
    raw = json.dumps({"cells": [cell, cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    nb = parse(raw.encode())
    assert nb.ids[0] == "same"
    assert nb.ids[1] != "same"
    assert nb.problems
    assert "shared an id" in nb.problems[0]


def test_trusted_and_signature_are_never_written() -> None:
    raw = json.dumps(
        {
            "cells": [
                {"cell_type": "markdown", "id": "m", "metadata": {"trusted": True}, "source": ""}
            ],
            "metadata": {"signature": "sha256:x"},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    ).encode()
    written = json.loads(serialize(parse(raw)))
    assert "signature" not in written["metadata"]
    assert "trusted" not in written["cells"][0]["metadata"]


def _long_stream_splice(nb: Notebook) -> bytes:
    return splice(nb, None).data


@pytest.mark.parametrize(
    ("write", "surrogate"),
    [(serialize, "\ud800"), (nblr.dump, "\ud800"), (_long_stream_splice, "\udfff")],
    ids=["ipynb", "nblr", "long stream"],
)
def test_every_writer_refuses_a_lone_surrogate_and_shows_it(
    write: Callable[[Notebook], bytes], surrogate: str
) -> None:
    cell = new_cell("code", f"x = '{surrogate}'", "a")
    if write is _long_stream_splice:  # a long stream is written slice by slice, not by json.dumps
        cell = new_cell("code", "print(x)", "a")
        cell["outputs"] = [
            {"output_type": "stream", "name": "stdout", "text": "y\n" * 40_000 + surrogate}
        ]
    with pytest.raises(NotebookInvalid) as raised:
        write(empty_notebook([cell]))
    assert "not valid Unicode" in str(raised.value)
    assert ascii(surrogate) in str(raised.value)  # shown escaped, never as the bad character
    assert "U+D800-U+DFFF" in raised.value.hint
