"""A TCP proxy in front of a Jupyter Server that passes every connection through, except those
whose first request is for one path: it accepts them and never answers (a server, or a proxy of
the operator's, that hangs on that path). Nothing in a real Jupyter Server can be made to hang
on one path for real, so the hanging part is this proxy; the server behind it is real."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream

_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


@dataclass
class Stalling:
    url: str
    held: int = 0  # connections accepted on the path and never answered


async def _pipe(source: ByteStream, sink: SocketStream) -> None:
    with contextlib.suppress(*_GONE):
        async for chunk in source:
            await sink.send(chunk)
    with contextlib.suppress(*_GONE):
        await sink.send_eof()


@contextlib.asynccontextmanager
async def stalling_proxy(upstream_port: int, path: str) -> AsyncIterator[Stalling]:
    """A proxy on a free port of 127.0.0.1 in front of ``upstream_port``, holding ``path``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)  # noqa: S610 - anyio's, not Django's
    stalling = Stalling(url=f"http://127.0.0.1:{port}/")

    async def handle(client: SocketStream) -> None:
        async with client:
            head = b""
            with contextlib.suppress(*_GONE):
                while b"\r\n" not in head:
                    head += await client.receive()
            request = head.split(b"\r\n", 1)[0].decode("latin-1")
            if not request:
                return
            parts = request.split(" ")
            if len(parts) > 1 and parts[1].split("?")[0].endswith(path):
                stalling.held += 1
                await anyio.sleep_forever()
            try:
                upstream = await anyio.connect_tcp("127.0.0.1", upstream_port)
            except OSError:
                return
            async with upstream, anyio.create_task_group() as tg:
                await upstream.send(head)
                tg.start_soon(_pipe, client, upstream)
                await _pipe(upstream, client)
                tg.cancel_scope.cancel()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield stalling
        finally:
            tg.cancel_scope.cancel()
