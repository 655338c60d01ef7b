"""One set of path rules for every store: file mode and live mode refuse the same paths."""

from __future__ import annotations

from pathlib import Path

import pytest

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
