"""One set of path rules for every store: file mode and live mode refuse the same paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbrelay.caller import ANYONE
from nbrelay.errors import PathError
from nbrelay.stores.contents import normalize
from nbrelay.stores.files import FileStore

REFUSED = {
    "": "empty",
    "a\x00.ipynb": "NUL",
    "x" * 2000 + ".ipynb": "too long",
    "a\udcff.ipynb": "lone surrogate",
    "a\\b.ipynb": "backslash",
    "http://host/a.ipynb": "URL",
    "%2e%2e/a.ipynb": "percent-encoded",
    "a\uff0fb.ipynb": "look-alikes",
    "..\uff0fa.ipynb": "look-alikes",
    "../a.ipynb": "'..'",
    "d/../../a.ipynb": "'..'",
    ".hidden/a.ipynb": "hidden",
    "d/.a.ipynb": "hidden",
    "./": "root folder",
    "a.txt": "not a .ipynb file",
    "a" * 300 + ".ipynb": "at most 255 bytes",
    "d/" + "é" * 128 + "/a.ipynb": "at most 255 bytes",  # 256 bytes of UTF-8 in 128 characters
}


@pytest.mark.parametrize(("path", "said"), REFUSED.items(), ids=list(REFUSED.values()))
def test_both_modes_refuse_the_same_paths_naming_the_problem(
    tmp_path: Path, path: str, said: str
) -> None:
    store = FileStore(tmp_path)
    with pytest.raises(PathError) as in_files:
        store.relative(path)
    with pytest.raises(PathError) as live:
        normalize(path)
    assert said in str(in_files.value)
    assert said in str(live.value)


def test_both_modes_accept_a_plain_path_the_same_way(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for path in ("a.ipynb", "./d/a.ipynb", "d//e/a.ipynb", "d/é ü.ipynb"):
        assert store.relative(path) == normalize(path)
    assert normalize("d//e/./a.ipynb") == "d/e/a.ipynb"


def test_live_mode_refuses_absolute_paths(tmp_path: Path) -> None:
    for path in ("/etc/a.ipynb", "~/a.ipynb"):
        with pytest.raises(PathError, match="absolute"):
            normalize(path)
    # File mode takes an absolute path inside its root, and only there.
    store = FileStore(tmp_path)
    assert store.relative(str(tmp_path / "a.ipynb")) == "a.ipynb"
    with pytest.raises(PathError, match="outside the root"):
        store.relative("/etc/a.ipynb")


def test_a_name_of_255_bytes_is_created_edited_and_listed(tmp_path: Path) -> None:
    """The longest name file systems take works: the temp file a write goes through and the
    saved kernel state are named to fit."""
    import anyio

    from nbrelay.config import Settings
    from nbrelay.notebook import edits
    from nbrelay.stores.paths import MAX_NAME_BYTES
    from nbrelay.workspace import Workspace
    from tests.helpers import notebook

    name = "é" * 121 + "a" * (MAX_NAME_BYTES - 242 - 6) + ".ipynb"
    assert len(name.encode()) == MAX_NAME_BYTES
    store = FileStore(tmp_path)

    async def run() -> None:
        await store.create(name, ANYONE, notebook("x = 1"), overwrite=False)
        await store.edit(
            name,
            ANYONE,
            lambda nb: edits.plan_set_source(nb, 0, "x = 2"),
            expected_version=None,
            guard_positions=False,
        )
        assert [e.path for e in await store.list("", ANYONE, recursive=True)] == [name]
        ws = Workspace(Settings(root=tmp_path, kernel_pool=0), store)
        for target in (ws.state_files.state_file(name), ws.state_files.session_state_file(name)):
            assert len(Path(target).name.encode()) + len(".partial") <= MAX_NAME_BYTES, target
        assert ws.state_files.state_file(name) != ws.state_files.session_state_file(name)

    anyio.run(run)
    assert (tmp_path / name).read_bytes().count(b"x = 2") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temp file left
