"""The one adapter for jupyter-collaboration's internals (``extension.collaboration``).

Pinned against the installed release: a real Jupyter Server with jupyter-collaboration runs
nbrelay's extension, which checks every attribute it uses when it starts and on each room it
joins; the agent's edit, save and the idle close of the room it opened all go through them. And
what a release without one of them does: nbrelay refuses, naming it, instead of reporting a save
that never happened (a renamed attribute cannot be caused for real: it is removed here).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nbrelay.extension.collaboration import (
    APP_NEEDS,
    ROOM_NEEDS,
    Collaboration,
    CollaborationChanged,
)
from tests.extension.conftest import ext_client
from tests.extension.test_extension import sources_on_disk
from tests.helpers import call, notebook, write_notebook
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio

REFUSAL = "cannot work in this server's collaboration rooms"


async def test_the_installed_collaboration_has_everything_nbrelay_uses(
    start_ext_server: Any,
) -> None:
    server: JupyterServer = start_ext_server(args=["--NbrelayExtension.room_idle_close=0.5"])
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    async with ext_client(server) as client:
        await call(client, "edit_cell", path="n.ipynb", cell=0, source="a = 2")
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert sources_on_disk(server.root / "n.ipynb") == ["a = 2"]
        assert "note" not in saved
        await wait_for(
            lambda: "nbrelay closed the room of n.ipynb" in server.log.read_text(), seconds=30
        )
    log = server.log.read_text()
    assert REFUSAL not in log
    assert "did not succeed" not in log
    assert "failed" not in log


def _app(**without: bool) -> Any:
    """A stand-in for jupyter-collaboration's extension app with every attribute nbrelay uses
    but those named."""
    server = SimpleNamespace(rooms={}, delete_room=None)
    values: dict[str, Any] = {
        "get_document": None,
        "ywebsocket_server": server,
        "file_loaders": {},
        "_room_locks": {},
        "stop_extension": None,
    }
    assert set(values) == set(APP_NEEDS)
    return SimpleNamespace(**{k: v for k, v in values.items() if k not in without})


@pytest.mark.parametrize("gone", APP_NEEDS)
async def test_an_app_without_what_nbrelay_uses_is_refused_naming_it(gone: str) -> None:
    collab = Collaboration(_app(**{gone: True}), serverapp=None)
    collab.check()
    assert collab.broken is not None
    assert gone in collab.broken.message
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.open("n.ipynb")
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.save(object(), 30)


async def test_a_room_class_without_its_save_is_refused_not_reported_saved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rooms = importlib.import_module("jupyter_server_ydoc.rooms")
    monkeypatch.delattr(rooms.DocumentRoom, "_save_to_disc")
    collab = Collaboration(_app(), serverapp=None)
    collab.check()
    with pytest.raises(CollaborationChanged, match="_save_to_disc") as refused:
        await collab.save(object(), 30)
    assert "nothing was changed" in refused.value.message
    assert refused.value.hint


@pytest.mark.parametrize("gone", ROOM_NEEDS)
async def test_a_room_without_what_nbrelay_uses_is_refused_naming_it(
    gone: str, tmp_path: Path
) -> None:
    room = SimpleNamespace(
        ydoc=None,
        clients=set(),
        ready=True,
        ready_event=None,
        _document=object(),
        _update_lock=None,
        _file=SimpleNamespace(last_modified=None, number_of_subscriptions=0),
    )
    delattr(room, gone)
    document = getattr(room, "_document", object())

    async def get_document(**kwargs: Any) -> Any:
        return document

    app = _app()
    app.get_document = get_document
    app.ywebsocket_server.rooms["json:notebook:f1"] = room
    serverapp = SimpleNamespace(
        web_app=SimpleNamespace(settings={"file_id_manager": SimpleNamespace(index=lambda p: "f1")})
    )
    collab = Collaboration(app, serverapp)
    collab.check()
    assert collab.broken is None
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.open("n.ipynb")
    # From then on every room operation refuses.
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.save(room, 30)
