"""The notebook model: parse and serialise nbformat v4 bytes, cell ids, and the version hash.

A notebook is kept as plain dicts (the nbformat v4 JSON shape) with multi-line strings joined,
exactly as ``nbformat.reads`` would give them but without ``NotebookNode`` wrappers. Serialising
follows nbformat's writer byte for byte (split lines, ``indent=1``, sorted keys, trailing
newline), so an edit changes only the lines of the cells it touches.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook import text as _text
from nbrelay.notebook.nbjson import encode_json_text as encode_json_text
from nbrelay.notebook.nbjson import split_cell
from nbrelay.notebook.shape import is_json_mime, shape_problem

Cell = dict[str, Any]
IdFactory = Callable[[], str]

CELL_TYPES = ("code", "markdown", "raw")
DEFAULT_KERNEL = "python3"  # the kernel of a notebook whose kernelspec names none
_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # nbformat 4.5's cell id


CELL_SEAM = b"\n  },\n  {\n"
"""Where one cell ends and the next begins in nbformat's layout (and nowhere else in it)."""


def version_of(raw: bytes) -> str:
    """Return the version of a notebook's bytes: 16 hex digits that change whenever the bytes do.

    The bytes are cut at each ``CELL_SEAM`` and the version is the hash of the pieces' hashes
    (``piece_digest``, ``version_from_digests``). It is a function of the bytes alone (the
    pieces joined by the seam give the bytes back), and it lets a save hash only the cells it
    wrote: the other cells' pieces, and so their digests, are those of the last save.
    """
    return version_from_digests(b"".join(map(piece_digest, raw.split(CELL_SEAM))))


def piece_digest(piece: bytes | memoryview) -> bytes:
    """The digest of one piece of a notebook's bytes (see ``version_of``)."""
    return hashlib.blake2b(piece, digest_size=16).digest()


def version_from_digests(*digests: bytes | memoryview) -> str:
    """The version of bytes whose pieces' digests, in order and joined, are ``digests`` (given
    whole or in consecutive parts, hashed as they are: nothing is joined)."""
    h = hashlib.blake2b(digests[0], digest_size=8)
    for part in digests[1:]:
        h.update(part)
    return h.hexdigest()


def random_id() -> str:
    """Return a new random cell id (8 hex digits, as JupyterLab makes them).

    Never all decimal digits: such an id would read like a cell index ("12345678").
    """
    while True:
        cid = secrets.token_hex(4)
        if not cid.isdigit():
            return cid


Step = tuple[int, int, list[Cell]]
"""One splice of a cell list: at this position, this many cells were taken out and these cells
put in (positions count in the list as it was just before the step)."""

_LOG_LIMIT = 32  # splices a map of positions follows before it is made again (Positions)


class _Memo:
    __slots__ = ("cells", "ids", "index", "origin", "sources", "spliced")

    def __init__(self, cells: list[Cell]) -> None:
        self.cells = cells
        self.ids: list[str] | None = None
        self.index: Positions | None = None
        self.sources: Sources | None = None
        # The cell list this one was made from by replacing the cells at these positions only.
        self.origin: tuple[list[Cell], tuple[int, ...]] | None = None
        # The cell list this one was made from by these splices (cells inserted, deleted, moved).
        self.spliced: tuple[list[Cell], tuple[Step, ...]] | None = None


def ids_of(cells: list[Cell]) -> list[str]:
    """The cells' ids in order (a pass over all cells, made once per cell list)."""
    return [c["id"] for c in cells]


def index_of(ids: list[str]) -> dict[str, int]:
    """Each id's position: the one pass over all cells that looking cells up by id costs, made
    once per cell list (and kept by edits that keep every id in place)."""
    return {c: i for i, c in enumerate(ids)}


class Positions:
    """Each cell id's position: a map made by one pass over the cells (``index_of``), followed
    through the splices made since (cells inserted, deleted, moved), so that inserting or
    deleting cells does not cost a pass over the others; after ``_LOG_LIMIT`` splices the map
    is made again from the ids (one pass per that many splices)."""

    __slots__ = ("base", "log")

    def __init__(
        self, base: dict[str, int], log: tuple[tuple[int, int, dict[str, int]], ...] = ()
    ) -> None:
        self.base, self.log = base, log

    def get(self, cid: str) -> int | None:
        at = self.base.get(cid)
        for start, removed, added in self.log:
            put = added.get(cid)
            if put is not None:  # put (back) here; a copy left elsewhere goes in a later splice
                at = start + put
            elif at is not None and at >= start + removed:
                at += len(added) - removed
            elif at is not None and at >= start:
                at = None  # taken out here
        return at

    def spliced(self, steps: Iterable[Step], ids: list[str]) -> Positions:
        """The positions after ``steps``; ``ids``: the ids after them (to start afresh from)."""
        log = self.log + tuple(
            (at, removed, {c["id"]: k for k, c in enumerate(added)}) for at, removed, added in steps
        )
        return Positions(index_of(ids)) if len(log) > _LOG_LIMIT else Positions(self.base, log)


class Sources(Mapping[str, str]):
    """Each cell's source by id, looked up in the cell list when asked (no map of all sources
    is made: an edit of one cell keeps the rest as they were, and so does this view of them).

    The view holds the whole cell list, outputs too; ``detached`` gives one that holds only
    the sources, for keeping after the notebook itself is let go."""

    __slots__ = ("_cells", "_ids", "_index", "_texts")

    def __init__(
        self, cells: list[Cell], ids: list[str], index: Positions, texts: list[str] | None = None
    ) -> None:
        self._cells, self._ids, self._index, self._texts = cells, ids, index, texts

    def __getitem__(self, cid: str) -> str:
        at = self._index.get(cid)
        if at is None:
            raise KeyError(cid)
        if self._texts is not None:
            return self._texts[at]
        return str(self._cells[at].get("source", ""))

    @property
    def holds_cells(self) -> bool:
        """True while this view keeps the cell list it reads (see ``detached``)."""
        return self._texts is None

    def detached(self) -> Sources:
        """The same sources without the cells they came from (one pass over the cells)."""
        if self._texts is not None:
            return self
        texts = [str(c.get("source", "")) for c in self._cells]
        return Sources([], self._ids, self._index, texts)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def as_dict(self) -> dict[str, str]:
        """Every cell's source by id, in one pass over the cells (no id looked up)."""
        if self._texts is not None:
            return dict(zip(self._ids, self._texts, strict=True))
        return dict(zip(self._ids, (str(c.get("source", "")) for c in self._cells), strict=True))


@dataclass
class Notebook:
    """A parsed notebook.

    ``data`` is the whole nbformat dict; ``ids_made`` is true when some cell ids exist only in
    memory (notebooks older than nbformat 4.5, or duplicated ids): the next write stores them
    and records the notebook as nbformat 4.5. ``problems`` are what the agent should be told
    about how the file was read (ids made, text that is not valid Unicode).
    """

    data: dict[str, Any]
    ids_made: bool = False
    problems: list[str] = field(default_factory=list)
    replaced: int = 0  # unpaired surrogates read as U+FFFD (the file still holds them)
    upgraded_from: int | None = None  # the nbformat major (1-3) the file holds, upgraded to 4
    _memo: _Memo | None = field(default=None, init=False, repr=False, compare=False)

    def _current(self) -> _Memo:
        """What is derived from the cell list, kept while the list is the same (cells are never
        changed in place, and an edit makes a new list)."""
        cells = self.data["cells"]
        if self._memo is None or self._memo.cells is not cells:
            self._memo = _Memo(cells)
        return self._memo

    def sources(self) -> Sources:
        """Each cell's source by id (a view of the cell list, which is never changed in place).
        What a reader last saw of each cell, for three-way merges of its edits."""
        memo = self._current()
        if memo.sources is None:
            memo.sources = Sources(memo.cells, self.ids, self._index())
        return memo.sources

    @property
    def cells(self) -> list[Cell]:
        cells: list[Cell] = self.data["cells"]
        return cells

    @property
    def ids(self) -> list[str]:
        """The cells' ids in order (computed once per cell list; not to be changed)."""
        memo = self._current()
        if memo.ids is None:
            memo.ids = ids_of(memo.cells)
        return memo.ids

    def position(self, cid: str) -> int | None:
        """The index of the cell with id ``cid`` (None: no such cell), by a map made once per
        cell list."""
        return self._index().get(cid)

    def _index(self) -> Positions:
        memo = self._current()
        if memo.index is None:
            memo.index = Positions(index_of(self.ids))
        return memo.index

    def derive(
        self, before: Notebook, same_ids: bool, changed: Iterable[int] | None = None
    ) -> None:
        """Take over what ``before`` derived from its cells, for a cell list made from its by
        edits that keep every id in place (``same_ids``), so an edit of one cell does not cost
        a pass over all of them. ``changed``: the only positions whose cells differ from
        ``before``'s (the others are the same objects), for ``changed_from``."""
        memo = self._current()
        if same_ids and changed is not None:
            memo.origin = (before.data["cells"], tuple(changed))
        old = before._memo
        if same_ids and old is not None and old.cells is before.data["cells"]:
            memo.ids, memo.index = old.ids, old.index

    def derive_spliced(
        self, before: Notebook, steps: tuple[Step, ...], origin: Notebook | None = None
    ) -> None:
        """Take over what ``before`` derived from its cells, for this cell list made from its by
        ``steps`` (cells inserted, deleted or moved; ``apply_notebook``), so that such an edit
        costs what it changed, not a pass over every cell. ``origin``: the notebook whose cell
        list the steps of ``before`` and then ``steps`` were made from (``spliced_from``), if
        not ``before``."""
        memo = self._current()
        start = origin if origin is not None else before
        if start is before:
            memo.spliced = (before.data["cells"], steps)
        else:
            first = before._current().spliced
            if first is not None and first[0] is start.data["cells"]:
                memo.spliced = (first[0], first[1] + steps)
        old = before._memo
        if old is None or old.cells is not before.data["cells"] or old.ids is None:
            return
        ids = old.ids
        for at, removed, added in steps:
            ids = [*ids[:at], *(c["id"] for c in added), *ids[at + removed :]]
        memo.ids = ids
        if old.index is not None:
            memo.index = old.index.spliced(steps, ids)

    def spliced_from(self, cells: list[Cell]) -> tuple[Step, ...] | None:
        """The splices that made this notebook's cell list from that very list ``cells``
        (every cell not put in by a splice is the same object), if ``derive_spliced`` knows
        them; None: not known."""
        spliced = self._current().spliced
        return spliced[1] if spliced is not None and spliced[0] is cells else None

    def changed_from(self, cells: list[Cell]) -> tuple[int, ...] | None:
        """The positions whose cells differ from ``cells`` (every other cell is the same
        object), if this notebook's cell list was made from that very list by ``derive``'s
        edits; None: not known."""
        origin = self._current().origin
        return origin[1] if origin is not None and origin[0] is cells else None

    def with_cells(self, cells: list[Cell]) -> Notebook:
        """Return a notebook sharing everything but the cell list (cells are not copied)."""
        data = dict(self.data)
        data["cells"] = cells
        return Notebook(
            data=data,
            ids_made=self.ids_made,
            problems=list(self.problems),
            upgraded_from=self.upgraded_from,
        )

    @property
    def kernel_name(self) -> str | None:
        spec = self.data.get("metadata", {}).get("kernelspec")
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            return str(spec["name"])
        return None

    @property
    def language(self) -> str | None:
        info = self.data.get("metadata", {}).get("language_info")
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            return str(info["name"])
        spec = self.data.get("metadata", {}).get("kernelspec")
        if isinstance(spec, dict) and isinstance(spec.get("language"), str):
            return str(spec["language"])
        return None


def utf8_text(raw: bytes, name: str, *, hint: str) -> str:
    """``raw`` as text (UTF-8, a byte-order mark dropped).

    Raises:
        NotebookInvalid: the bytes are not UTF-8 (the message names the first bad byte).
    """
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NotebookInvalid(
            f"{name} is not UTF-8 text (byte {exc.start} is invalid).", hint=hint
        ) from exc


def parse(raw: bytes, *, name: str = "notebook") -> Notebook:
    """Parse notebook bytes.

    Raises:
        NotebookInvalid: the bytes are not JSON (the message gives line and column), nest too
            deeply, or are not an nbformat 4 notebook.
    """
    text = utf8_text(
        raw, name, hint="Notebooks are UTF-8 JSON; re-save it from Jupyter or fix the encoding."
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookInvalid(
            f"{name} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            hint="Fix the JSON by hand or restore the file from version control; nbrelay will not "
            "write over a file it cannot read.",
        ) from exc
    except RecursionError as exc:
        raise NotebookInvalid(
            f"{name} nests JSON values too deeply to read.",
            hint="The file is corrupt or hostile; restore it from version control.",
        ) from exc
    except ValueError as exc:  # a number too long to convert (over 4,300 digits)
        raise NotebookInvalid(
            f"{name} cannot be read: {str(exc)[:120]}.",
            hint="The file is corrupt or hostile; restore it from version control.",
        ) from exc
    return from_dict(data, name=name, scrub=_text.may_hold_surrogates(raw))


def from_dict(data: Any, *, name: str = "notebook", scrub: bool = True) -> Notebook:
    """Build a Notebook from an nbformat v4 dict, joining split lines and filling missing ids.

    With ``scrub``, text that is not valid Unicode (unpaired surrogates, which JSON escapes can
    hold) is replaced by U+FFFD and the notebook's ``problems`` say where.
    """
    if not isinstance(data, dict):
        raise NotebookInvalid(
            f"{name} is not a notebook: its JSON top level is a {type(data).__name__}, not an object.",
            hint="A notebook file is a JSON object with 'cells', 'metadata' and 'nbformat' keys.",
        )
    major = data.get("nbformat")
    upgraded = None
    if type(major) is int and 1 <= major < 4:
        data, upgraded = _upgrade(data, major, name), major
    elif type(major) is not int or major != 4:
        raise NotebookInvalid(
            f"{name} is nbformat {major!r}; nbrelay reads nbformat 1-4 notebooks.",
            hint="Check that the file is a Jupyter notebook.",
        )
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise NotebookInvalid(
            f"{name} has no 'cells' list.",
            hint="A notebook file is a JSON object with 'cells', 'metadata' and 'nbformat' keys.",
        )
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise NotebookInvalid(
                f"{name}: cell {i} is a JSON {type(cell).__name__}, not an object.",
                hint="Each cell is an object with 'cell_type', 'source' and 'metadata'; fix the "
                "file by hand or restore it from version control.",
            )
    problem = shape_problem(data)
    if problem:
        raise NotebookInvalid(
            f"{name} is damaged: {problem}.",
            hint="nbrelay reads notebooks whose fields have nbformat's types. Fix the file by "
            "hand (or restore it from version control); `jupyter nbconvert --to notebook` "
            "shows what nbformat makes of it.",
        )
    if "metadata" not in data:
        data["metadata"] = {}
    replaced = _scrub(data) if scrub else {}
    nb = Notebook(data=data)
    _rejoin(data["cells"])
    _strip_transient(data)
    _fill_ids(nb)
    if upgraded is not None:
        nb.upgraded_from = upgraded
        nb.problems.append(
            f"{name} is nbformat {upgraded}: it was upgraded to nbformat 4 in memory, as nbformat "
            "does; the first edit stores it as nbformat 4.5 (the file is unchanged until then)"
        )
    if replaced:
        nb.problems.append(_unicode_problem(nb, replaced))
        nb.replaced = sum(n for n, _ in replaced.values())
    return nb


def _upgrade(data: dict[str, Any], major: int, name: str) -> dict[str, Any]:
    """An nbformat 1-3 notebook as nbformat upgrades it to 4 (``nbformat.reads(...,
    as_version=4)``), as plain dicts; the random ids nbformat gives its cells are dropped, so
    that ids are made from the cells' sources as for any notebook older than 4.5."""
    import warnings

    import nbformat

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            upgraded = nbformat.reads(json.dumps(data), as_version=4)  # type: ignore[no-untyped-call]
        plain: dict[str, Any] = json.loads(json.dumps(upgraded))
    except Exception as exc:  # nbformat raises its own ValidationError, KeyError, TypeError…
        raise NotebookInvalid(
            f"{name} is nbformat {major}, and nbformat cannot upgrade it to 4: {str(exc)[:200]}",
            hint="Open it in Jupyter to see what nbformat makes of it, or restore it from "
            "version control.",
        ) from exc
    for cell in plain.get("cells") or ():
        if isinstance(cell, dict):
            cell.pop("id", None)
    plain["nbformat_minor"] = 4  # written as 4.5 (with ids) on the first edit
    return plain


def _scrub(data: dict[str, Any]) -> dict[int, tuple[int, str]]:
    """Replace unpaired surrogates in place; return {cell index (-1: outside cells): (how many,
    the first as an escape)}."""
    found: dict[int, tuple[int, str]] = {}
    for key in list(data):
        if key == "cells":
            continue
        first = _text.first_surrogate(data[key]) or _text.first_surrogate(key)
        if first:
            value, n = _text.scrub(data.pop(key))
            clean_key = _text.clean_text(key)
            data[clean_key] = value
            count = found.get(-1, (0, first))[0]
            found[-1] = (count + max(n, 1), first)
    cells = data["cells"]
    for i, cell in enumerate(cells):
        first = _text.first_surrogate(cell)
        if first:
            cells[i], n = _text.scrub(cell)
            found[i] = (n, first)
    return found


def _unicode_problem(nb: Notebook, replaced: dict[int, tuple[int, str]]) -> str:
    where = []
    for i in sorted(k for k in replaced if k >= 0)[:5]:
        cid = nb.cells[i].get("id")
        where.append(f"cell {i}" + (f" (id {cid!r})" if isinstance(cid, str) else ""))
    more = len([k for k in replaced if k >= 0]) - len(where)
    if more > 0:
        where.append(f"{more} more cell{'s' if more != 1 else ''}")
    if -1 in replaced:
        where.append("the notebook's metadata")
    total = sum(n for n, _ in replaced.values())
    first = replaced[min(replaced, key=lambda k: (k < 0, k))][1]
    places = where[0] if len(where) == 1 else f"{', '.join(where[:-1])} and {where[-1]}"
    return (
        f"{places} {'hold' if len(where) > 1 else 'holds'} text that is not valid Unicode ({total} unpaired surrogate "
        f"code point{'s' if total != 1 else ''} such as {first}, from JSON escapes); each is "
        "shown as U+FFFD (\ufffd), and an edit saves the notebook with U+FFFD in its place."
    )


def _strip_transient(data: dict[str, Any]) -> None:
    """Drop what nbformat never stores (as ``nbformat.reads`` does): trust flags and signatures,
    which a Jupyter Server adds when it hands a notebook out."""
    for key in ("orig_nbformat", "orig_nbformat_minor", "signature"):
        data["metadata"].pop(key, None)
    for cell in data["cells"]:
        if isinstance(cell, dict) and isinstance(cell.get("metadata"), dict):
            cell["metadata"].pop("trusted", None)


def _join(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "".join(value)
    return value


def _rejoin(cells: list[Any]) -> None:
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        if "source" in cell:
            cell["source"] = _join(cell["source"])
        for bundle in (cell.get("attachments") or {}).values():
            if isinstance(bundle, dict):
                for mime in list(bundle):
                    if not is_json_mime(mime):
                        bundle[mime] = _join(bundle[mime])
        if cell.get("cell_type") == "code" and isinstance(cell.get("outputs"), list):
            for out in cell["outputs"]:
                if not isinstance(out, dict):
                    continue
                if isinstance(out.get("data"), dict):
                    data = out["data"]
                    for mime in list(data):
                        if not is_json_mime(mime):
                            data[mime] = _join(data[mime])
                elif "text" in out:
                    out["text"] = _join(out["text"])


def content_id(source: str, seen: set[str]) -> str:
    """Return an id derived from a cell's source, unique among ``seen`` (and add it)."""
    base = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]
    candidate, n = base, 1
    while candidate in seen:
        candidate = f"{base}-{n}"
        n += 1
    seen.add(candidate)
    return candidate


def _fill_ids(nb: Notebook) -> None:
    seen: set[str] = set()
    missing: list[dict[str, Any]] = []
    invalid: list[str] = []
    duplicated = False
    raw_cells: list[Any] = nb.cells
    for cell in raw_cells:
        if not isinstance(cell, dict):
            continue
        cid = cell.get("id")
        if isinstance(cid, str) and _ID.fullmatch(cid) and cid not in seen:
            seen.add(cid)
        else:
            if isinstance(cid, str) and cid in seen:
                duplicated = True
            elif isinstance(cid, str):
                invalid.append(cid)
            missing.append(cell)
    for cell in missing:
        source = cell.get("source")
        cell["id"] = content_id(source if isinstance(source, str) else "", seen)
    if missing:
        nb.ids_made = True
        if duplicated:
            nb.problems.append(
                "some cells shared an id; nbrelay gave the later ones new ids in memory"
            )
        if invalid:
            shown = ", ".join(repr(c[:40]) for c in invalid[:3])
            nb.problems.append(
                f"cell ids {shown} are not valid nbformat ids (1-64 letters, digits, - or _); "
                "nbrelay gave those cells new ids in memory, which the first edit stores"
            )


def serialize(nb: Notebook) -> bytes:
    """Return the file bytes of a notebook, as nbformat's writer would produce them.

    Notebooks whose ids were made in memory are written as nbformat 4.5, which stores ids.
    """
    data = dict(nb.data)
    metadata = dict(data.get("metadata") or {})
    for key in ("orig_nbformat", "orig_nbformat_minor", "signature"):
        metadata.pop(key, None)
    data["metadata"] = metadata
    if nb.ids_made or int(data.get("nbformat_minor", 0)) < 5:
        data["nbformat_minor"] = max(5, int(data.get("nbformat_minor", 0)))
    data["cells"] = [split_cell(c) for c in nb.cells]
    text = json.dumps(data, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False)
    return encode_json_text(text + "\n")


def new_cell(
    cell_type: str, source: str, cell_id: str, metadata: dict[str, Any] | None = None
) -> Cell:
    """Return a new cell dict of the given type (code cells start without outputs)."""
    cell: Cell = {
        "cell_type": cell_type,
        "id": cell_id,
        "metadata": dict(metadata or {}),
        "source": source,
    }
    if cell_type == "code":
        cell["execution_count"] = None
        cell["outputs"] = []
    return cell


def new_notebook(
    cells: Iterable[Cell] = (),
    *,
    kernel_name: str = "python3",
    display_name: str | None = None,
    language: str = "python",
) -> Notebook:
    """Return a new nbformat 4.5 notebook with the given kernelspec."""
    data: dict[str, Any] = {
        "cells": list(cells),
        "metadata": {
            "kernelspec": {
                "display_name": display_name or _default_display_name(kernel_name),
                "language": language,
                "name": kernel_name,
            },
            "language_info": {"name": language},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return Notebook(data=data)


def _default_display_name(kernel_name: str) -> str:
    if kernel_name == "python3":
        return "Python 3 (ipykernel)"
    return kernel_name


def unique_id(existing: set[str], factory: IdFactory) -> str:
    """Return an id from ``factory`` that is not in ``existing`` (and add it)."""
    for _ in range(1000):
        cid = factory()
        if cid not in existing:
            existing.add(cid)
            return cid
    raise NotebookInvalid(
        "could not make a unique cell id", hint="The id factory keeps repeating itself."
    )
