"""One descriptor walk (``runtime.descend``) for the root folder, the runtime folder and the
kernels' state files: folder by folder, never through a symlink, no descriptor left open."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nbrelay import runtime
from nbrelay.kernels import introspect


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _kernel_folder() -> Callable[[str, bool], int]:
    """``_nbrelay_folder`` as a kernel defines it: the snippet run with nothing imported."""
    namespace: dict[str, Any] = {}
    exec(introspect._FOLDER_AT, namespace)  # noqa: S102 - the snippet nbrelay sends to kernels
    folder: Callable[[str, bool], int] = namespace["_nbrelay_folder"]
    return folder


def test_the_kernels_walk_makes_only_the_last_folder_and_returns_it(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    folder = _kernel_folder()
    before = _open_fds()
    fd = folder(str(tmp_path / "a" / "b" / "state"), True)
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "a" / "b" / "state"))
    finally:
        os.close(fd)
    with pytest.raises(FileNotFoundError):
        folder(str(tmp_path / "missing" / "state"), True)
    assert not (tmp_path / "missing").exists()
    with pytest.raises(FileNotFoundError):
        folder(str(tmp_path / "a" / "other"), False)
    assert _open_fds() == before


def test_the_kernels_walk_refuses_a_folder_swapped_for_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "state").mkdir(parents=True)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a").symlink_to(outside)
    folder = _kernel_folder()
    before = _open_fds()
    with pytest.raises(OSError, match=r"Not a directory|symbolic links") as refused:
        folder(str(tmp_path / "root" / "a" / "state"), True)
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)  # Linux says ENOTDIR
    assert _open_fds() == before


def test_descend_closes_what_it_holds_when_a_step_fails(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "file").write_text("not a folder")
    before = _open_fds()
    with pytest.raises(NotADirectoryError):
        runtime.descend(
            os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY), ["a", "file"], runtime.open_subfolder
        )
    assert _open_fds() == before
    fd = runtime.descend(
        os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY), ["a", "b"], runtime.open_subfolder
    )
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "a" / "b"))
    finally:
        os.close(fd)
    assert _open_fds() == before
