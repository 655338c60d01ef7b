"""What nbrelay keeps on disk about a Jupyter Server (readers' last reads, undo, run journals)
is keyed by that server: two servers in process on one machine (one base URL, every one of
them) keep theirs apart by their contents roots."""

from __future__ import annotations

from pathlib import Path

from jupyter_server.services.contents.filemanager import FileContentsManager

from nbrelay.extension.store import server_store


def test_two_servers_in_process_keep_their_state_apart(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = server_store(FileContentsManager(root_dir=str(tmp_path / "a")), None)
    b = server_store(FileContentsManager(root_dir=str(tmp_path / "b")), None)
    again = server_store(FileContentsManager(root_dir=str(tmp_path / "a")), None)
    assert a.state_key != b.state_key
    assert a.state_key == again.state_key  # the same server after a restart finds its state
    assert str((tmp_path / "a").resolve()) in a.state_key
