"""The MCP SDK internals nbrelay relies on (``nbrelay.tools.sdk``), each checked against the
installed SDK: an upgrade that moves one of them fails here, by name. The ``tools/list`` each
profile sends is pinned in tests/tools/golden/ (and, with ``--output-schemas``, the output
schemas in tests/tools/golden_output_schemas/)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import mcp.server.mcpserver.server as sdk_server
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import TextContent
from pydantic import BaseModel

from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.server import PROFILES, build_server
from nbrelay.tools import sdk
from nbrelay.tools._boundary import Registrar, bind

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden_output_schemas"
REGEN = os.environ.get("NBRELAY_REGEN_GOLDEN") == "1"


class Echoed(BaseModel):
    text: str | None
    reader: str


async def _echo(state: str, caller: Caller, text: str | None = None) -> Echoed:
    """Echo the text as the tool received it, and the key of the client that called."""
    return Echoed(text=text, reader=f"{state}:{caller.key}")


def _server(**options: Any) -> MCPServer[Any]:
    reg = Registrar(**options)
    reg.tool(kind="read")(bind(_echo, "bound"))
    return MCPServer("probe", tools=reg.tools)


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, TextContent)
    data: dict[str, Any] = json.loads(block.text)
    return data


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_arguments_reach_the_tool_as_sent(mode: str) -> None:
    """hand_over_arguments: the SDK would json-decode "[1]" sent to a ``str | None``."""
    async with Client(_server(), mode=mode) as client:
        got = _structured(await client.call_tool("_echo", {"text": "[1]"}))
    assert got["text"] == "[1]"
    assert got["reader"].startswith("bound:")


async def test_each_client_connection_gets_its_own_stable_key() -> None:
    """pass_context + caller_of: a tool that declares no Context still learns which client
    calls; one connection keeps its key, another connection gets another."""
    server = _server()
    async with Client(server, mode="legacy") as first, Client(server, mode="legacy") as second:
        a1 = _structured(await first.call_tool("_echo", {}))["reader"]
        a2 = _structured(await first.call_tool("_echo", {}))["reader"]
        b = _structured(await second.call_tool("_echo", {}))["reader"]
    assert a1 == a2
    assert a1 != b
    assert a1 != "bound:"


async def test_in_process_sessionless_clients_are_anyone() -> None:
    """stream_of: the in-process 2026-07-28 client gets a new connection per request and shares
    the SDK's "no channel" with every other such client, so it is nobody in particular (the key
    "", not a new key per request, which would lose its undo history between calls)."""
    server = _server()
    async with Client(server, mode="auto") as first, Client(server, mode="auto") as second:
        keys = {
            _structured(await c.call_tool("_echo", {}))["reader"] for c in (first, first, second)
        }
    assert keys == {"bound:"}
    assert sdk.NO_CHANNEL is not None  # what stream_of compares with


def test_bound_tools_list_their_own_parameters_only() -> None:
    """bind: the state parameter is not a tool parameter; the name and docstring stay."""
    reg = Registrar()
    reg.tool(kind="read")(bind(_echo, "bound"))
    (tool,) = reg.tools
    assert tool.name == "_echo"
    assert list(tool.parameters["properties"]) == ["text"]
    assert tool.description.startswith("Echo the text")


async def test_output_schemas_are_declared_only_when_asked() -> None:
    async with Client(_server()) as client:
        (plain,) = (await client.list_tools()).tools
    async with Client(_server(output_schemas=True)) as client:
        (declared,) = (await client.list_tools()).tools
    assert plain.output_schema is None
    assert declared.output_schema is not None
    assert set(declared.output_schema["properties"]) == {"text", "reader"}


def test_the_sdk_log_setup_is_replaced() -> None:
    """plain_logging: the SDK still has the hook nbrelay replaces (else it would import rich)."""
    assert hasattr(sdk_server, "configure_logging")
    sdk.plain_logging()
    assert sdk_server.configure_logging.__module__ == "nbrelay.tools.sdk"


async def test_legacy_resource_subscriptions_are_answered(tmp_path: Path) -> None:
    """add_request_handler: resources/subscribe, which MCPServer itself does not register."""
    settings = Settings(root=tmp_path, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings), mode="legacy") as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.subscribe_resource("nbrelay://notebook/a.ipynb")
            await client.unsubscribe_resource("nbrelay://notebook/a.ipynb")


async def test_subscriptions_listen_is_nbrelays_and_still_advertised(tmp_path: Path) -> None:
    """add_request_handler replaces the SDK's own subscriptions/listen handler (for task
    notifications, nbrelay.tools.listen); the 2026-07-28 capabilities, which the SDK derives
    from the handler being there, still say resources can be subscribed to."""
    from nbrelay.tools.listen import Listen

    settings = Settings(root=tmp_path, lock_dir=tmp_path / "locks")
    server = build_server(settings)
    entry = server._lowlevel_server.get_request_handler("subscriptions/listen")
    assert entry is not None
    assert isinstance(entry.handler, Listen)
    async with Client(server, mode="auto") as client:
        caps = client.session.server_capabilities
        assert caps is not None
        assert caps.resources is not None
        assert caps.resources.subscribe is True
        async with client.listen(resource_subscriptions=["nbrelay://notebook/a.ipynb"]) as sub:
            assert sub.honored.resource_subscriptions == ["nbrelay://notebook/a.ipynb"]


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_output_schemas_match_the_golden_file(profile: str, tmp_path: Path) -> None:
    """With --output-schemas every tool declares the schema the SDK builds from its return type
    (slimmed as nbrelay sends it): an SDK upgrade that changes one shows as a diff here."""
    settings = Settings(
        root=tmp_path, profile=profile, lock_dir=tmp_path / "locks", output_schemas=True
    )
    async with Client(build_server(settings)) as client:
        tools = (await client.list_tools()).tools
    got = {t.name: t.output_schema for t in tools}
    path = GOLDEN / f"{profile}.json"
    if REGEN:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    want = json.loads(path.read_text(encoding="utf-8"))
    assert got == want, (
        f"output schemas of {profile} changed; if intended, regenerate with "
        "NBRELAY_REGEN_GOLDEN=1 and review the diff of tests/tools/golden_output_schemas/"
    )


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_described_tool_is_the_sdks_own_tool_without_its_model(
    profile: str, tmp_path: Path
) -> None:
    """``sdk.described_tool`` makes, from ``argument_schema(argument_model(fn))``, the tool that
    ``Tool.from_function`` makes: the same listing, the same context parameter, and the same
    argument model (fields and schema) on demand."""
    from mcp.server.mcpserver.tools import Tool

    server = build_server(Settings(root=tmp_path, profile=profile, lock_dir=tmp_path / "locks"))
    tools = server._tool_manager.list_tools()
    assert tools
    for tool in tools:
        sdks = Tool.from_function(tool.fn, name=tool.name, structured_output=False)
        model = sdk.argument_model(tool.fn)
        assert sdk.argument_schema(model) == sdks.parameters
        assert list(model.model_fields) == list(sdks.fn_metadata.arg_model.model_fields)
        ours = sdk.described_tool(
            tool.fn,
            name=tool.name,
            description=sdks.description,
            parameters=sdk.argument_schema(model),
            annotations=None,
            meta=None,
        )
        assert ours.context_kwarg == (sdks.context_kwarg or sdk.CONTEXT_KWARG)
        assert ours.is_async == sdks.is_async
        listed = ours.model_dump(exclude={"fn_metadata"})
        assert listed == {
            **sdks.model_dump(exclude={"fn_metadata"}),
            "context_kwarg": ours.context_kwarg,
        }
        assert ours.fn_metadata.validate_arguments({"x": "[1]"}) == {
            sdk.RAW_ARGUMENTS: {"x": "[1]"}
        }
