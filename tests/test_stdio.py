"""One real stdio subprocess: `nbrelay serve` driven by the official MCP client."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import call, call_error

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stdio-root")


@pytest.fixture(scope="module")
async def stdio_client(served: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "nbrelay",
            "serve",
            "--root",
            str(served),
            "--tools",
            "create_notebook,insert_cells,read_notebook,edit_cell",
        ],
    )
    async with Client(params) as client:
        yield client


async def test_serve_over_stdio_exposes_only_the_chosen_tools(stdio_client: Client) -> None:
    names = sorted(t.name for t in (await stdio_client.list_tools()).tools)
    assert names == ["create_notebook", "edit_cell", "insert_cells", "read_notebook"]


async def test_serve_over_stdio_edits_files_on_disk(stdio_client: Client, served: Path) -> None:
    created = await call(stdio_client, "create_notebook", path="s.ipynb", cells=["1 + 1"])
    await call(
        stdio_client,
        "edit_cell",
        path="s.ipynb",
        cell=0,
        source="2 + 2",
        expected_version=created["version"],
    )
    assert '"2 + 2"' in (served / "s.ipynb").read_text()
    assert "outside the root" in await call_error(stdio_client, "read_notebook", path="/etc/passwd")


# -- lines the transport cannot decode ------------------------------------------------------------

DEEP = 50_000


async def test_a_request_that_cannot_be_decoded_gets_a_json_rpc_error(tmp_path: Path) -> None:
    """Over stdio an undecodable request got no answer at all (the client waited forever);
    now each gets a JSON-RPC error with its id, as HTTP answers 400, and the server goes on."""
    import json

    import anyio
    from anyio.streams.buffered import BufferedByteReceiveStream

    process = await anyio.open_process(
        [sys.executable, "-m", "nbrelay", "serve", "--root", str(tmp_path), "--kernel-pool", "0"]
    )
    assert process.stdin is not None
    assert process.stdout is not None
    lines = BufferedByteReceiveStream(process.stdout)

    async def send(line: str) -> None:
        assert process.stdin is not None
        await process.stdin.send(line.encode() + b"\n")

    async def answer() -> dict[str, object]:
        with anyio.fail_after(60):
            got: dict[str, object] = json.loads(await lines.receive_until(b"\n", 1 << 24))
        return got

    def call(rid: int, arguments: str) -> str:
        return (
            f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call",'
            f'"params":{{"name":"read_notebook","arguments":{arguments}}}}}'
        )

    try:
        await send(
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}'
        )
        assert (await answer())["id"] == 1
        await send('{"jsonrpc":"2.0","method":"notifications/initialized"}')

        await send(call(2, '{"path":"\\ud800.ipynb"}'))  # a lone surrogate escape
        lone = await answer()
        assert lone["id"] == 2
        assert isinstance(lone["error"], dict)
        assert lone["error"]["code"] == -32700
        assert "lone surrogate escape" in lone["error"]["message"]

        await send(call(3, '{"path":' + "[" * DEEP + "]" * DEEP + "}"))
        deep = await answer()
        assert deep["id"] == 3
        assert isinstance(deep["error"], dict)
        assert "nested deeper" in deep["error"]["message"]

        await send('{"jsonrpc":"2.0","id":"four","method":5}')  # JSON, but no request
        invalid = await answer()
        assert invalid["id"] == "four"
        assert isinstance(invalid["error"], dict)
        assert invalid["error"]["code"] == -32600

        await send('{"jsonrpc":"2.0","id":"\\udc80","method":"x","p":"\\ud800"}')
        unsendable = await answer()  # an id no answer can carry (a lone surrogate): null
        assert unsendable["id"] is None
        assert isinstance(unsendable["error"], dict)
        assert unsendable["error"]["code"] == -32700

        await send("this is not JSON")
        garbage = await answer()
        assert garbage["id"] is None
        assert isinstance(garbage["error"], dict)
        assert garbage["error"]["code"] == -32700

        # A notification gets no answer, even a broken one: the next answer is the ping's.
        await send('{"jsonrpc":"2.0","method":"notifications/x","params":{"s":"\\udfff"}}')
        await send('{"jsonrpc":"2.0","id":6,"method":"ping"}')
        assert (await answer()) == {"jsonrpc": "2.0", "id": 6, "result": {}}

        await send('{"jsonrpc":"2.0","id":7,"method":"tools/list"}')
        listed = await answer()
        assert listed["id"] == 7
        assert "result" in listed
    finally:
        await process.stdin.aclose()
        with anyio.fail_after(60):
            await process.wait()


@pytest.mark.parametrize(
    ("line", "members", "whole"),
    [
        ('{"id": 5, "method": "x"}', {"id": 5, "method": "x"}, True),
        ('{"params": ' + "[" * 1000 + "]" * 1000 + ', "id": "a\\"b"}', {"id": 'a"b'}, True),
        ('{"params": {"s": "\\ud800 ]}"}, "id": 1}', {"id": 1}, True),
        ('{"id": 2, "params": [[[', {"id": 2}, False),
        ("[1, 2]", {}, False),
        ("", {}, False),
    ],
)
def test_the_top_level_of_a_line_is_read_without_its_nested_values(
    line: str, members: dict[str, object], whole: bool
) -> None:
    from nbrelay.stdio import top_level

    assert top_level(line) == (members, whole)
