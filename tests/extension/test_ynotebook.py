"""The linear conversion of jupyter_ydoc's notebook documents (``extension.ynotebook``).

Pinned against the installed jupyter_ydoc: every notebook of other projects' sdists, grown past
the size where the linear path starts and edited the way a person's client edits it, converts to
exactly what jupyter_ydoc's own conversion gives. What JSON cannot carry takes jupyter_ydoc's own
path, and a release whose conversion differs is left alone (a changed release cannot be caused
for real: its per-cell step is replaced here). In a real Jupyter Server, the extension installs it
and jupyter-collaboration saves a big notebook's room with it.
"""

from __future__ import annotations

import copy
import json
import logging
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_ydoc import YNotebook
from pycrdt import Doc, Map, Text

from nbrelay.extension import ynotebook
from tests.corpus import world
from tests.extension.conftest import ext_client
from tests.helpers import call
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def original(monkeypatch: pytest.MonkeyPatch) -> Any:
    """jupyter_ydoc's own ``_get``, restored after the test (``install`` patches the class)."""
    own = YNotebook._get
    monkeypatch.setattr(YNotebook, "_get", own)
    return own


def converted(get: Any, document: YNotebook, deduplicate: bool = True) -> str:
    *_, last = get(document, deduplicate)
    return json.dumps(last, sort_keys=True)


def grown(notebook: dict[str, Any], cells: int) -> dict[str, Any]:
    """The notebook with its cells repeated up to ``cells`` (ids kept unique)."""
    big = copy.deepcopy(notebook)
    big["cells"] = []
    while len(big["cells"]) < cells:
        round_ = len(big["cells"]) // len(notebook["cells"])
        for cell in copy.deepcopy(notebook["cells"]):
            if "id" in cell:
                cell["id"] = f"{cell['id']}-{round_}"
            big["cells"].append(cell)
    return big


def edit_as_a_person(document: YNotebook) -> None:
    """What a collaborator's client does to the document: typing, outputs, moves, deletes."""
    cells = document.ycells
    with document.ydoc.transaction():
        cells[1]["source"].insert(0, "# é😀 typed\n")
        code = next((c for c in cells if c.get("cell_type") == "code"), None)
        if code is not None:
            code["outputs"].append(
                Map({"output_type": "stream", "name": "stdout", "text": Text("new\n")})
            )
            code["execution_count"] = 7.0  # JavaScript numbers arrive as floats
        cells[2]["metadata"]["tags"] = ["moved"]
        moved = document.create_ycell(document.get_cell(2))  # a move: deleted, inserted again
        del cells[2]
        cells.append(moved)
        del cells[0]


def test_the_linear_conversion_installs_on_this_jupyter_ydoc(original: Any) -> None:
    assert ynotebook.install()
    installed = YNotebook._get
    assert installed is not original
    assert getattr(installed, ynotebook._MARK) is original
    assert ynotebook.install()  # once: not wrapped twice
    assert YNotebook._get is installed


def test_every_world_notebook_converts_as_jupyter_ydoc_does(original: Any) -> None:
    assert ynotebook.install()
    linear = YNotebook._get
    calls = {"own": 0}

    def counted(self: Any, deduplicate: bool = True) -> Any:
        calls["own"] += 1
        return original(self, deduplicate)

    checked = linear_paths = 0
    for path in world.notebooks():
        try:
            notebook = json.loads(path.read_text(encoding="utf-8"))
            if not notebook.get("cells") or len(notebook["cells"]) < 3:
                continue
            big = grown(notebook, ynotebook.SMALL + 1)
            document = YNotebook(Doc())
            document.set(big)
        except Exception:  # noqa: S112 - invalid on purpose (the sdists' own damaged cases)
            continue
        for edited in (False, True):
            if edited:
                edit_as_a_person(document)
            for deduplicate in (True, False):
                before = calls["own"]
                got = converted(ynotebook.linear(counted, _cast_all()), document, deduplicate)
                linear_paths += calls["own"] == before
                assert got == converted(original, document, deduplicate), world.name_of(path)
                assert converted(linear, document, deduplicate) == got
                checked += 1
    assert checked >= 300, checked  # 93 notebooks of 3 cells or more, 4 conversions each
    assert linear_paths >= 0.9 * checked, (linear_paths, checked)  # not all fallbacks


def _cast_all() -> Any:
    from jupyter_ydoc.utils import cast_all

    return cast_all


def _big_document(**metadata: Any) -> YNotebook:
    cells: list[dict[str, Any]] = [
        {"cell_type": "code", "id": f"c{n}", "source": f"x = {n}", "metadata": {},
         "execution_count": None, "outputs": []}
        for n in range(ynotebook.SMALL + 5)
    ]  # fmt: skip
    document = YNotebook(Doc())
    document.set({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    for key, value in metadata.items():
        document.ycells[3]["metadata"][key] = value
    return document


@pytest.mark.parametrize(
    ("case", "value"),
    [("NaN", float("nan")), ("infinity", float("inf")), ("null", None)],
)
def test_what_json_cannot_carry_takes_jupyter_ydocs_own_path(
    original: Any, case: str, value: Any
) -> None:
    """pycrdt writes NaN and infinity as JSON's ``null``; any ``null`` but an execution count's
    goes through jupyter_ydoc's own conversion (which raises on NaN, as it always did)."""
    calls = {"own": 0}

    def counted(self: Any, deduplicate: bool = True) -> Any:
        calls["own"] += 1
        return original(self, deduplicate)

    document = _big_document(k=value)
    linear = ynotebook.linear(counted, _cast_all())
    if case == "null":
        assert converted(linear, document) == converted(original, document)
    else:
        with pytest.raises((ValueError, OverflowError)):
            converted(linear, document)
    assert calls["own"] == 1
    # execution counts of null (cells never run) keep the linear path
    calls["own"] = 0
    assert converted(linear, _big_document()) == converted(original, _big_document())
    assert calls["own"] == 0


@pytest.mark.parametrize(
    "key", ['a"execution_count', 'x,"execution_count', "{", "execution_count2", "null"]
)
def test_a_key_that_looks_like_an_execution_count_is_not_taken_for_one(
    original: Any, key: str
) -> None:
    """The ``null`` check is made on the JSON text; keys whose text holds an execution count's,
    with NaN (written as ``null``) for a value, still take jupyter_ydoc's own path."""
    calls = {"own": 0}

    def counted(self: Any, deduplicate: bool = True) -> Any:
        calls["own"] += 1
        return original(self, deduplicate)

    with pytest.raises(ValueError, match="NaN"):  # as jupyter_ydoc's own conversion raises
        converted(ynotebook.linear(counted, _cast_all()), _big_document(**{key: float("nan")}))
    assert calls["own"] == 1


def test_nulls_are_counted_on_the_text_not_looked_for_in_every_value(
    original: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting the work, not the time: a notebook whose only ``null`` are execution counts is
    not walked value by value; one with "null" in a cell's text is, and keeps the linear path."""
    walked = {"n": 0}
    own_check = ynotebook._has_null

    def counted_check(value: Any, key: str = "") -> bool:
        walked["n"] += 1
        return own_check(value, key)

    monkeypatch.setattr(ynotebook, "_has_null", counted_check)
    calls = {"own": 0}

    def counted(self: Any, deduplicate: bool = True) -> Any:
        calls["own"] += 1
        return original(self, deduplicate)

    linear = ynotebook.linear(counted, _cast_all())
    document = _big_document(nested={"execution_count": None})
    assert converted(linear, document) == converted(original, document)
    assert walked["n"] == 0
    assert calls["own"] == 0
    document = _big_document(note="a null pointer")
    document.ycells[7]["source"] = Text("x = 'null'")
    assert converted(linear, document) == converted(original, document)
    assert walked["n"] >= ynotebook.SMALL  # each cell looked at, none found
    assert calls["own"] == 0


def test_duplicated_cell_ids_are_renamed_by_jupyter_ydoc_itself(original: Any) -> None:
    calls = {"own": 0}

    def counted(self: Any, deduplicate: bool = True) -> Any:
        calls["own"] += 1
        return original(self, deduplicate)

    document = _big_document()
    document.ycells[9]["id"] = "c4"
    document.ycells[9]["source"] = Text("different")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = json.loads(converted(ynotebook.linear(counted, _cast_all()), document))
    assert calls["own"] == 1
    ids = [cell["id"] for cell in got["cells"]]
    assert len(ids) == len(set(ids)) == ynotebook.SMALL + 5
    assert document.ycells[9]["id"] == ids[9] != "c4"  # renamed in the document, as it does


def test_a_json_form_it_cannot_read_takes_jupyter_ydocs_own_path(original: Any) -> None:
    """pycrdt always gives JSON; a release that gave something else would not break saves
    (faked: the document's cell array answers ``str`` with text that is not a JSON array)."""

    class Unreadable:
        def __init__(self, document: YNotebook, text: str) -> None:
            self.cells, self.text = document.ycells, text

        def __len__(self) -> int:
            return len(self.cells)

        def __str__(self) -> str:
            return self.text

    calls = {"own": 0}

    def counted(self: Any, deduplicate: bool = True) -> Any:
        calls["own"] += 1
        real = self._ycells
        self._ycells = real.cells
        try:
            yield from original(self, deduplicate)
        finally:
            self._ycells = real

    for text in ("not json", '[{"cell_type": "code", "id": "a", "source": "x"}, {broken'):
        calls["own"] = 0
        document = _big_document()
        expected = converted(original, document)
        document._ycells = Unreadable(document, text)
        assert converted(ynotebook.linear(counted, _cast_all()), document) == expected
        assert calls["own"] == 1


def test_a_release_that_converts_otherwise_is_left_alone(
    original: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    own_step = YNotebook._cell_to_py

    def another_step(self: Any, ycell: Any, meta: Any = None) -> dict[str, Any]:
        cell: dict[str, Any] = own_step(self, ycell, meta)
        if not isinstance(ycell, Map):  # only the linear path's cells: the outputs differ
            cell["extra"] = True
        return cell

    monkeypatch.setattr(YNotebook, "_cell_to_py", another_step)
    with caplog.at_level(logging.WARNING, logger="nbrelay.extension"):
        assert not ynotebook.install()
    assert YNotebook._get is original
    assert "differs from this jupyter_ydoc's" in caplog.text
    monkeypatch.delattr(YNotebook, "_cell_to_py")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nbrelay.extension"):
        assert not ynotebook.install()
    assert YNotebook._get is original
    assert "has no _get or _cell_to_py" in caplog.text


def _has_edit(path: Path) -> bool:
    return "edited = True" in path.read_text(encoding="utf-8")


async def test_collaboration_saves_a_big_room_with_it_in_a_real_server(
    start_ext_server: Any,
) -> None:
    """The extension installs it where jupyter-collaboration runs. The agent's edit in a big
    notebook of another project's cells (outputs, widget state), saved by the server, gives the
    same file byte for byte as with ``linear_notebook_reads=False`` (jupyter_ydoc's own
    conversion)."""
    source = next(p for p in world.notebooks() if world.name_of(p).endswith("files/Output.ipynb"))
    notebook = nbformat.reads(source.read_text(encoding="utf-8"), as_version=4)
    big = nbformat.from_dict(grown(dict(notebook), 3 * ynotebook.SMALL))
    big.nbformat_minor = 5
    for n, cell in enumerate(big.cells):
        cell["id"] = f"cell-{n}"
    edited = 2 * ynotebook.SMALL + 1
    ids: set[str] = set()  # the linear path, not a fallback
    assert not any(ynotebook._unsure_cell(c, True, ids) for c in json.loads(json.dumps(big.cells)))
    saved: dict[bool, bytes] = {}
    for installed in (True, False):
        server: JupyterServer = start_ext_server(
            args=[f"--NbrelayExtension.linear_notebook_reads={installed}"]
        )
        path: Path = server.root / "big.ipynb"
        path.write_text(json.dumps(big, indent=1), encoding="utf-8")
        async with ext_client(server) as client:
            await call(client, "edit_cell", path="big.ipynb", cell=edited, source="edited = True")
            await call(client, "save_notebook", path="big.ipynb")
        await wait_for(partial(_has_edit, path), seconds=30)
        saved[installed] = path.read_bytes()
        line = "notebook rooms are converted in one read of their cells"
        assert (line in server.log.read_text()) is installed
    on_disk = nbformat.reads(saved[True].decode(), as_version=4)
    assert on_disk.cells[edited].source == "edited = True"
    assert len(on_disk.cells) == len(big.cells)
    assert on_disk.cells[edited + 1 :] == big.cells[edited + 1 :]  # outputs and all
    assert saved[True] == saved[False]
