"""The binary kernel WebSocket protocol (``v1.kernel.websocket.jupyter.org``), checked against
Jupyter Server's own reader and writer of it (the server nbrelay talks to)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)

from nbrelay.kernels import remote_api, ws_v1

MSG: dict[str, Any] = {
    "header": {"msg_id": "m1", "msg_type": "execute_reply", "session": "s", "version": "5.3"},
    "parent_header": {"msg_id": "p1", "msg_type": "execute_request"},
    "metadata": {"started": "2026-11-28T10:00:00Z"},
    "content": {"status": "ok", "execution_count": 3, "text": "ünïcode ✓"},
    "channel": "shell",
}


def test_what_nbrelay_sends_is_what_jupyter_server_reads() -> None:
    request = remote_api.shell_request("execute_request", {"code": "print('é')"}, "sess")
    channel, parts = deserialize_msg_from_ws_v1(ws_v1.encode(request))
    assert channel == "shell"
    assert [json.loads(p) for p in parts] == [
        request["header"],
        request["parent_header"],
        request["metadata"],
        request["content"],
    ]
    # Binary buffers (a widget's) follow the four parts.
    with_buffers = {**MSG, "buffers": [b"\x00\x01", b"abc"]}
    _, parts = deserialize_msg_from_ws_v1(ws_v1.encode(with_buffers))
    assert parts[4:] == [b"\x00\x01", b"abc"]


def test_what_jupyter_server_sends_is_what_nbrelay_reads() -> None:
    parts = [json.dumps(MSG[k]).encode() for k in ("header", "parent_header", "metadata")]
    parts += [json.dumps(MSG["content"]).encode(), b"\xffbinary buffer"]
    frame = serialize_msg_to_ws_v1(parts, "iopub")
    msg = ws_v1.decode(frame)
    assert msg is not None
    assert msg["channel"] == "iopub"
    for part in ("header", "parent_header", "metadata", "content"):
        assert msg[part] == MSG[part]
    assert (msg["msg_type"], msg["msg_id"], msg["buffers"]) == ("execute_reply", "m1", [])
    assert ws_v1.decode(ws_v1.encode(MSG)) == {
        **MSG,
        "msg_type": "execute_reply",
        "msg_id": "m1",
        "buffers": [],
    }


def _frame(count: int, offsets: list[int], body: bytes) -> bytes:
    return b"".join(n.to_bytes(8, "little") for n in (count, *offsets)) + body


GOOD = ws_v1.encode(MSG)


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (b"", "empty"),
        (GOOD[:5], "shorter than its count"),
        (GOOD[: len(GOOD) - 3], "shorter than its last offset"),
        (_frame(3, [32, 32, 32], b""), "too few parts"),
        (_frame(2**40, [0], b""), "a count far past its end"),
        (_frame(6, [56, 61, 60, 62, 63, 64], b"shell{}{}{}"), "offsets going back"),
        (_frame(6, [40, 45, 47, 49, 51, 53], b"shell{}{}{}"), "a first offset not after them"),
        (_frame(6, [56, 61, 62, 64, 66, 68], b"shell[{}{}{}"), "not JSON"),
        (_frame(6, [56, 58, 60, 62, 64, 66], b"\xff\xfe{}{}{}{}"), "a channel not UTF-8"),
    ],
)
def test_a_frame_that_is_not_a_message_is_none(frame: bytes, why: str) -> None:
    assert ws_v1.decode(frame) is None, why
