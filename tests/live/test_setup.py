"""Choosing live mode from the settings, and where the Jupyter token comes from (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbrelay.config import load
from nbrelay.errors import InvalidArgument
from nbrelay.jupyter_api import load_token
from nbrelay.kernels.remote import RemoteKernels
from nbrelay.server import build_workspace
from nbrelay.stores.rtc import RTCStore
from nbrelay.stores.rtc_websocket import WebSocketWay


def test_jupyter_url_selects_live_mode_with_the_servers_kernels() -> None:
    settings = load({"jupyter_url": "http://127.0.0.1:8888/lab", "agent_name": "Ada"}, {}, {})
    ws = build_workspace(settings)
    assert isinstance(ws.store, RTCStore)
    assert ws.store.api.base == "http://127.0.0.1:8888/"
    assert isinstance(ws.store.way, WebSocketWay)
    assert ws.store.way.user["name"] == "Ada"
    assert isinstance(ws.kernels.current, RemoteKernels)


def test_the_token_comes_from_the_environment_or_a_file_never_a_flag(tmp_path: Path) -> None:
    settings = load({"jupyter_url": "http://h/"}, {"JUPYTER_TOKEN": "from-env"}, {})
    token = load_token(settings)
    assert token is not None
    assert token.reveal() == "from-env"
    assert "from-env" not in repr(settings)
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    settings = load({"jupyter_url": "http://h/", "jupyter_token_file": str(secret)}, {}, {})
    token = load_token(settings)
    assert token is not None
    assert token.reveal() == "from-file"
    (tmp_path / "empty").write_text("")
    with pytest.raises(InvalidArgument, match="is empty"):
        load_token(load({"jupyter_token_file": str(tmp_path / "empty")}, {}, {}))
    with pytest.raises(InvalidArgument, match="cannot be read"):
        load_token(load({"jupyter_token_file": str(tmp_path / "missing")}, {}, {}))


def test_live_mode_and_a_kernel_gateway_are_exclusive(tmp_path: Path) -> None:
    settings = load(
        {"jupyter_url": "http://a/", "kernel_gateway_url": "http://b/", "root": str(tmp_path)},
        {},
        {},
    )
    with pytest.raises(InvalidArgument, match="cannot be used together"):
        build_workspace(settings)
    gateway = build_workspace(load({"kernel_gateway_url": "http://b/", "root": str(tmp_path)}))
    kernels = gateway.kernels.current
    assert isinstance(kernels, RemoteKernels)
    assert kernels.api.base == "http://b/"
