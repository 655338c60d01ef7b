"""The binary form of the Jupyter protocol on a kernel WebSocket, ``v1.kernel.websocket.jupyter.org``.

JupyterLab offers this subprotocol when it opens ``api/kernels/{id}/channels``, and Jupyter
Server 2 picks it; some servers speak nothing else (jupyter-server-documents, the real-time
collaboration of Jupyter AI's ``rtc-jsd`` deployments, fails on the JSON form). nbrelay offers it
too, and speaks whichever form the server picked (``kernels.ws_channels``).

A frame is: the number of offsets ``n`` (an unsigned 64-bit little-endian integer), then ``n``
offsets of the same kind, counted from the frame's start; the channel name is the bytes from the
first offset to the second, and each later pair of offsets holds one part: the header, parent
header, metadata and content (UTF-8 JSON), then the binary buffers; the last offset is the
frame's end. Pure: no I/O.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

SUBPROTOCOL = "v1.kernel.websocket.jupyter.org"

_WORD = 8
_JSON_PARTS = ("header", "parent_header", "metadata", "content")


def encode(msg: Mapping[str, Any]) -> bytes:
    """``msg`` (the JSON form: its parts and ``channel``; buffers as bytes) as one frame."""
    parts = [
        json.dumps(msg.get(name) or {}, separators=(",", ":")).encode() for name in _JSON_PARTS
    ]
    parts.extend(bytes(b) for b in msg.get("buffers") or () if isinstance(b, bytes | bytearray))
    channel = str(msg.get("channel") or "shell").encode()
    count = len(parts) + 2  # where the channel starts, where each part starts, the end
    offsets = [_WORD * (1 + count)]
    for chunk in (channel, *parts):
        offsets.append(offsets[-1] + len(chunk))
    head = b"".join(n.to_bytes(_WORD, "little") for n in (count, *offsets))
    return b"".join((head, channel, *parts))


def decode(frame: bytes) -> dict[str, Any] | None:
    """The message in ``frame`` in the JSON form (``channel``, the four parts, ``buffers``
    left empty: nbrelay reads none), or None if the frame is not one."""
    size = len(frame)
    if size < _WORD:
        return None
    count = int.from_bytes(frame[:_WORD], "little")
    if count < 2 + len(_JSON_PARTS) or _WORD * (1 + count) > size:
        return None
    offsets = [
        int.from_bytes(frame[_WORD * (i + 1) : _WORD * (i + 2)], "little") for i in range(count)
    ]
    if offsets[0] != _WORD * (1 + count) or offsets[-1] > size:
        return None
    if any(b < a for a, b in itertools.pairwise(offsets)):
        return None
    try:
        msg: dict[str, Any] = {"channel": frame[offsets[0] : offsets[1]].decode()}
        for i, name in enumerate(_JSON_PARTS):
            part = json.loads(frame[offsets[i + 1] : offsets[i + 2]] or b"{}")
            msg[name] = part if isinstance(part, dict) else {}
    except ValueError:  # not UTF-8, or not JSON
        return None
    msg["msg_type"] = msg["header"].get("msg_type")
    msg["msg_id"] = msg["header"].get("msg_id")
    msg["buffers"] = []
    return msg
