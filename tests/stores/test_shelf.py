"""The readers' reads kept on disk for replicas (``--shared-state``): kept, forgotten with their
notebook, and removed once unused for the retention period."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nbrelay import runtime
from nbrelay.stores.shelf import Shelf


def test_reads_are_kept_forgotten_and_expire(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    shelf = Shelf("file:/root", folder=folder)
    shelf.put("token:a", "n.ipynb", "v1", ["c0"], {"c0": "x"})
    shelf.put("token:a", "m.ipynb", "v2", None, {"c0": "y"})
    seen = shelf.get("token:a", "n.ipynb")
    assert seen is not None
    assert (seen.version, seen.order, seen.sources) == ("v1", ("c0",), {"c0": "x"})
    assert shelf.get("token:b", "n.ipynb") is None  # another reader read nothing

    shelf.forget("n.ipynb")
    assert shelf.get("token:a", "n.ipynb") is None
    assert shelf.get("token:a", "m.ipynb") is not None

    # Unused past the retention period: removed at the next sweep (a new process's first write).
    old = time.time() - runtime.STATE_RETENTION - 60
    for path in folder.rglob("*.v"):
        os.utime(path, (old, old))
    Shelf("file:/root", folder=folder).put("token:c", "k.ipynb", "v3", None, {})
    assert shelf.get("token:a", "m.ipynb") is None
    assert shelf.get("token:c", "k.ipynb") is not None
    assert sorted(p.suffix for p in folder.rglob("*") if p.is_file()) == [".s", ".v"]
