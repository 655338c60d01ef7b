"""Many notebooks under the root: list_notebooks pages within the output budget and its pattern
narrows the walk; search_notebook searches a folder or a glob in one call and returns matches
only, with the same confinement as every path. In file mode and live mode, both client modes."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nbrelay.config import Settings
from tests.helpers import call, call_error, notebook, text_of, write_notebook

pytestmark = pytest.mark.anyio

BUDGET = Settings().output_budget
# The result's JSON around its entries ({"folder":".","count":50,...,"next_start":50}).
FRAME = 100


def tree(root: Path, count: int) -> list[str]:
    """``count`` notebooks: three at the top, the rest in five folders; their paths in the
    order a walk lists them (each folder's notebooks by name, then its subfolders)."""
    made = []
    for i in range(count):
        rel = f"top{i}.ipynb" if i < 3 else f"f{i % 5}/n{i:03d}.ipynb"
        write_notebook(root / rel, notebook(f"x = {i}"))
        made.append(rel)
    top = sorted(p for p in made if "/" not in p)
    return top + sorted(p for p in made if "/" in p)


async def pages(client: Client, tool: str, **args: Any) -> tuple[list[dict[str, Any]], int]:
    """Every page of a paged result, following next_start; and the longest page's text."""
    got: list[dict[str, Any]] = []
    longest = 0
    start: int | None = 0
    while start is not None:
        result = await client.call_tool(tool, {**args, "start": start})
        assert not result.is_error, text_of(result)
        longest = max(longest, len(text_of(result)))
        page = result.structured_content
        assert isinstance(page, dict)
        got.append(page)
        assert page.get("next_start") is None or page["next_start"] > start
        start = page.get("next_start")
        assert len(got) < 200, "next_start does not advance"
    return got, longest


async def test_list_notebooks_pages_within_the_output_budget(client: Client, root: Path) -> None:
    walk_order = tree(root, 133)
    first = await call(client, "list_notebooks")
    assert first["count"] == 50  # the default limit, as read_notebook's
    assert first["next_start"] == 50
    assert [n["path"] for n in first["notebooks"]] == walk_order[:50]

    listed, longest = await pages(client, "list_notebooks", limit=30)
    assert [n["path"] for p in listed for n in p["notebooks"]] == walk_order  # each once, in order
    assert all(p["count"] == 30 for p in listed[:-1])
    assert longest <= BUDGET

    # A limit past the budget: the budget decides, and next_start says where to go on.
    big, longest = await pages(client, "list_notebooks", limit=1000)
    assert len(big) > 1
    assert [n["path"] for p in big for n in p["notebooks"]] == walk_order
    assert longest <= BUDGET + FRAME

    last = await call(client, "list_notebooks", start=130)
    assert [n["path"] for n in last["notebooks"]] == walk_order[130:]
    assert "next_start" not in last
    assert (await call(client, "list_notebooks", start=500))["count"] == 0


async def test_list_notebooks_pattern_matches_names_anywhere_or_paths(
    client: Client, root: Path
) -> None:
    walk_order = tree(root, 40)

    async def listed(pattern: str, **args: Any) -> list[str]:
        found = await call(client, "list_notebooks", pattern=pattern, limit=1000, **args)
        return [n["path"] for n in found["notebooks"]]

    assert await listed("f2/*") == [p for p in walk_order if p.startswith("f2/")]
    assert await listed("n01*") == [p for p in walk_order if "/n01" in p]  # a name, any folder
    assert await listed("f[13]/n02*.ipynb") == [
        "f1/n021.ipynb",
        "f1/n026.ipynb",
        "f3/n023.ipynb",
        "f3/n028.ipynb",
    ]
    assert await listed("**/n007.ipynb") == ["f2/n007.ipynb"]
    assert await listed("f4/") == [p for p in walk_order if p.startswith("f4/")]
    assert await listed("top*") == ["top0.ipynb", "top1.ipynb", "top2.ipynb"]
    assert await listed("*/top*") == []  # a path pattern: one folder deep
    assert await listed("n0*", folder="f3") == [p for p in walk_order if p.startswith("f3/")]
    assert await listed("*", recursive=False) == ["top0.ipynb", "top1.ipynb", "top2.ipynb"]
    text = await call_error(client, "list_notebooks", pattern="../*")
    assert "contains '..'" in text


# -- what a walk opens ---------------------------------------------------------------------------

_IN_OPEN = 0x20
_IN_NONBLOCK = os.O_NONBLOCK
_EVENT = struct.Struct("iIII")


@contextmanager
def folders_opened(root: Path) -> Iterator[set[str]]:
    """The folders under ``root`` that any process (nbrelay, or the Jupyter Server it asks)
    opens while the block runs, as Linux's inotify reports them."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = libc.inotify_init1(_IN_NONBLOCK)
    if fd < 0:
        pytest.fail(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
    watches: dict[int, str] = {}
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        wd = libc.inotify_add_watch(fd, str(folder).encode(), _IN_OPEN)
        assert wd >= 0, os.strerror(ctypes.get_errno())
        watches[wd] = folder.relative_to(root).as_posix()
    opened: set[str] = set()
    try:
        yield opened
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:  # pragma: no cover - EAGAIN under another name
                if exc.errno == errno.EAGAIN:
                    break
                raise
            at = 0
            while at < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, at)
                if mask & _IN_OPEN and size == 0 and wd in watches:  # the watched folder itself
                    opened.add(watches[wd])
                at += _EVENT.size + size
    finally:
        os.close(fd)


async def test_a_path_pattern_walks_only_the_folders_it_can_match_in(
    client: Client, root: Path
) -> None:
    for team in ("sales", "ops", "hr"):
        for year in ("2023", "2024"):
            write_notebook(root / team / year / "deep" / "q1.ipynb", notebook("x"))
    with folders_opened(root) as opened:
        found = await call(client, "list_notebooks", pattern="sales/2024/**")
    assert [n["path"] for n in found["notebooks"]] == ["sales/2024/deep/q1.ipynb"]
    assert opened, "the walk opened nothing inotify saw"
    assert {"ops", "hr", "sales/2023", "ops/2024"}.isdisjoint(opened), opened
    assert {"sales/2024", "sales/2024/deep"} <= opened


# -- search over many notebooks ------------------------------------------------------------------


def needles(root: Path) -> dict[str, list[int]]:
    """Thirty notebooks, some with 'needle' in a cell (by index), one in an output only."""
    where: dict[str, list[int]] = {}
    for i in range(30):
        rel = f"g{i % 3}/m{i:02d}.ipynb"
        cells = [f"a = {i}", "needle = 1" if i % 4 == 0 else "b = 2", f"# needle {i}" * (i == 7)]
        write_notebook(root / rel, notebook(*cells))
        hits = [k for k, c in enumerate(cells) if "needle" in c]
        if hits:
            where[rel] = hits
    out = notebook("print(x)")
    out.cells[0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "needle\n"}]
    write_notebook(root / "g0/printed.ipynb", out)
    return where


async def test_search_a_folder_or_glob_returns_matches_only_with_their_notebook(
    client: Client, root: Path
) -> None:
    where = needles(root)
    found = await call(client, "search_notebook", path="", pattern="needle")
    assert "version" not in found
    assert found["searched"] == 31
    got = {(m["path"], m["index"]) for m in found["matches"]}
    assert got == {(p, k) for p, ks in where.items() for k in ks}
    assert found["total"] == len(got)
    assert all(m["id"] and m["line"] == 0 for m in found["matches"])
    assert "next_start" not in found

    in_g1 = await call(client, "search_notebook", path="g1", pattern="NEEDLE")
    assert {m["path"] for m in in_g1["matches"]} == {p for p in where if p.startswith("g1/")}
    assert in_g1["searched"] == 10

    glob = await call(client, "search_notebook", path="g*/m0[0-4]*", pattern="needle")
    assert {m["path"] for m in glob["matches"]} == {"g0/m00.ipynb", "g1/m04.ipynb"}

    outputs = await call(client, "search_notebook", path="g0/", pattern="needle", outputs=True)
    printed = [m for m in outputs["matches"] if m["path"] == "g0/printed.ipynb"]
    assert printed == [{"path": "g0/printed.ipynb", "index": 0, "id": "c0", "line": 0,
                        "text": "needle", "where": "output"}]  # fmt: skip

    one = await call(client, "search_notebook", path="g0/m00.ipynb", pattern="needle")
    assert one["version"]
    assert one["matches"] == [{"index": 1, "id": "c1", "line": 0, "text": "needle = 1"}]
    assert "does not exist" in await call_error(
        client, "search_notebook", path="nowhere", pattern="needle"
    )


async def test_search_over_many_pages_within_limit_and_budget(client: Client, root: Path) -> None:
    where = needles(root)
    everything = {(p, k) for p, ks in where.items() for k in ks}
    paged, longest = await pages(client, "search_notebook", path="", pattern="needle", limit=3)
    assert len(paged) > 2
    seen = [(m["path"], m["index"]) for p in paged for m in p["matches"]]
    assert sorted(seen) == sorted(everything)  # each match once
    assert all(len(p["matches"]) <= 3 for p in paged)
    assert sum(p["searched"] for p in paged) == 31

    # One notebook with more matches than a result may carry: its first ones, and a note.
    write_notebook(
        root / "g2/loud.ipynb", notebook(*[f"needle_{k} = {'y' * 150}" for k in range(400)])
    )
    loud, longest = await pages(client, "search_notebook", path="g2", pattern="needle")
    assert longest <= BUDGET + FRAME
    cut = [p for p in loud if "g2/loud.ipynb" in (p.get("note") or "")]
    assert len(cut) == 1
    assert "alone has 400 matches" in cut[0]["note"]
    assert cut[0]["total"] >= 400
    assert {m["path"] for m in cut[0]["matches"]} == {"g2/loud.ipynb"}


@pytest.mark.parametrize("store_mode", ["files"])  # symlinks and hidden folders on disk
async def test_search_over_many_keeps_to_the_root_and_skips_what_it_cannot_read(
    client: Client, root: Path, tmp_path: Path
) -> None:
    needles(root)
    outside = tmp_path / "outside"
    write_notebook(outside / "secret.ipynb", notebook("needle = 'outside'"))
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "g1" / "evil.ipynb").symlink_to(outside / "secret.ipynb")
    write_notebook(root / ".hidden" / "h.ipynb", notebook("needle = 'hidden'"))
    (root / "g2" / "broken.ipynb").write_text("{not json", encoding="utf-8")
    found = await call(client, "search_notebook", path="", pattern="needle", limit=1000)
    texts = " ".join(m["text"] for m in found["matches"])
    assert "outside" not in texts
    assert "hidden" not in texts
    assert not any(m["path"].startswith(("linked/", ".hidden/")) for m in found["matches"])
    assert "g1/evil.ipynb" not in {m["path"] for m in found["matches"]}
    assert "could not be read" in found["note"]
    assert "g2/broken.ipynb" in found["note"]
    for path in ("linked", ".hidden", "../outside", str(outside)):
        result = await client.call_tool("search_notebook", {"path": path, "pattern": "needle"})
        assert result.is_error or not result.structured_content["matches"], path
