"""The extension's real-path check (``extension.contents.Confinement``) on a real folder served by
Jupyter's own ``FileContentsManager``: what it refuses, and how many system calls a check costs
(it runs on the Jupyter Server's event loop on every call of every tool)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager

from nbrelay.errors import PathError
from nbrelay.extension.contents import Confinement


def _served(tmp_path: Path) -> tuple[Path, Confinement]:
    """A root several folders deep (every folder above it is a part ``realpath`` walks), with a
    notebook, one in a subfolder, links in and out, a hidden file and a FIFO."""
    root = tmp_path / "home" / "user" / "projects" / "analysis" / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.ipynb"
    outside.write_text("{}")
    (root / "nb.ipynb").write_text("{}")
    (root / "sub" / "deep.ipynb").write_text("{}")
    (root / ".secret.ipynb").write_text("{}")
    (root / "out.ipynb").symlink_to(outside)
    (root / "keys").symlink_to(tmp_path)
    (root / "same.ipynb").symlink_to(root / "sub" / "deep.ipynb")
    (root / "shown.ipynb").symlink_to(root / ".secret.ipynb")
    os.mkfifo(root / "pipe.ipynb")
    return root, Confinement(FileContentsManager(root_dir=str(root)))


def test_a_check_costs_one_lstat_per_part_below_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a path without links, one lstat per part of the path below the root and nothing else
    (it walked every part of the root's own path again, then stat'ed the file)."""
    root, confinement = _served(tmp_path)
    calls: list[str] = []
    for name in ("lstat", "stat", "readlink"):
        real = getattr(os, name)

        def counted(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, counted)
    for path, parts in (("nb.ipynb", 1), ("sub/deep.ipynb", 2), ("sub/new.ipynb", 2)):
        calls.clear()
        assert confinement.check(path) == str(root / path)
        assert calls == ["lstat"] * parts, (path, calls)
    calls.clear()
    assert confinement.check("missing/new.ipynb") == str(root / "missing" / "new.ipynb")
    assert calls == ["lstat"]  # nothing below a missing folder


def test_links_take_the_full_rules_and_are_refused_out_of_the_root(tmp_path: Path) -> None:
    root, confinement = _served(tmp_path)
    assert confinement.check("same.ipynb") == str(root / "sub" / "deep.ipynb")
    for path, says in (
        ("out.ipynb", "outside the root"),
        ("keys/outside.ipynb", "outside the root"),
        ("keys/new.ipynb", "outside the root"),
        ("shown.ipynb", "hidden file"),
        ("pipe.ipynb", "not a regular file"),
        ("../outside.ipynb", "'..'"),
        (".secret.ipynb", "hidden"),
    ):
        with pytest.raises(PathError, match=says):
            confinement.check(path)
