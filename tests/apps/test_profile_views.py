"""The notebook view for the compatibility profiles: ``apps.VIEW_TOOLS`` names each profile's
tools that show it, and ``apps.extension(profile, tools)`` binds them. The server here is built
as ``server.build_server`` builds it, with the extension given the profile's tools."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from nbrelay.config import Settings
from nbrelay.server import PROFILES, build_workspace
from nbrelay.tools import apps
from nbrelay.tools._boundary import Registrar
from nbrelay.workspace import Workspace
from tests.apps.test_notebook_view import AppsSupport
from tests.helpers import notebook, text_of, write_notebook

pytestmark = pytest.mark.anyio


class Shown(BaseModel):
    path: str


def _server(root: Path, profile: str, extra: Any = None) -> MCPServer[Any]:
    settings = Settings(root=root, profile=profile, lock_dir=root.parent / "locks")
    ws = build_workspace(settings)
    reg = Registrar()
    PROFILES[profile](reg, ws)
    if extra is not None:
        extra(reg, ws)

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[Workspace]:
        async with ws.running():
            yield ws

    return MCPServer(
        "nbrelay",
        lifespan=lifespan,
        tools=reg.tools,
        extensions=[apps.extension(profile, reg.tools)],
    )


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    write_notebook(root / "a.ipynb", notebook("x = 1", "print(x)"))
    return root


@pytest.mark.parametrize(
    ("profile", "tool", "arguments"),
    [
        ("ipynb-mcp", "get_formatted_content", {"filepath": "a.ipynb"}),
        ("mcp-jupyter", "query_notebook", {"notebook_path": "a", "query_type": "view_source"}),
        ("jupyterlab-rtc", "read_nb_cells", {"path": "/a.ipynb"}),
    ],
)
async def test_profile_tools_show_the_view(
    tmp_path: Path, profile: str, tool: str, arguments: dict[str, Any]
) -> None:
    root = _root(tmp_path)
    async with Client(_server(root, profile)) as plain:
        listed = {t.name: t for t in (await plain.list_tools()).tools}
        before = await plain.call_tool(tool, arguments)
    assert not before.is_error, text_of(before)
    for name in apps.VIEW_TOOLS[profile]:
        assert (listed[name].meta or {}).get("ui") == {"resourceUri": apps.VIEW_URI}, name
    assert listed[apps.POLL_TOOL].meta == apps.POLL_META
    assert before.meta is None or apps.VIEW_KEY not in before.meta
    async with Client(_server(root, profile), extensions=[AppsSupport()]) as shows:
        after = await shows.call_tool(tool, arguments)
        polled = await shows.call_tool(apps.POLL_TOOL, {"path": "a.ipynb"})
    assert text_of(after) == text_of(before)  # the model reads the same
    assert after.meta is not None
    view = after.meta[apps.VIEW_KEY]
    assert view["path"] == "a.ipynb"
    assert [c["source"] for c in view["cells"]] == ["x = 1", "print(x)"]
    assert not polled.is_error, text_of(polled)
    assert polled.meta is not None
    assert polled.meta[apps.VIEW_KEY]["cells"] == view["cells"]


async def test_a_profile_tool_attaches_the_view_itself(tmp_path: Path) -> None:
    """``attach``: the one call a tool whose notebook is not in its arguments makes."""
    root = _root(tmp_path)

    def current_notebook_tool(reg: Registrar, ws: Workspace) -> None:
        @reg.tool(kind="read", name="show_current", meta=apps.VIEW_META)
        async def show_current(ctx: Context) -> Any:
            """Show the current notebook."""
            return await apps.attach(ctx, ws, Shown(path="a.ipynb"), "a.ipynb")

    async with Client(_server(root, "notebook-lr", current_notebook_tool)) as plain:
        listed = {t.name: t for t in (await plain.list_tools()).tools}
        before = await plain.call_tool("show_current", {})
    for name in apps.VIEW_TOOLS["notebook-lr"]:  # bound; their calls attach it themselves
        assert (listed[name].meta or {}).get("ui") == {"resourceUri": apps.VIEW_URI}, name
    assert before.meta is None or apps.VIEW_KEY not in before.meta
    async with Client(
        _server(root, "notebook-lr", current_notebook_tool), extensions=[AppsSupport()]
    ) as shows:
        after = await shows.call_tool("show_current", {})
    assert text_of(after) == text_of(before)
    assert after.meta is not None
    assert after.meta[apps.VIEW_KEY]["cells"][1]["source"] == "print(x)"


async def test_profiles_without_the_extension_list_nothing_new(tmp_path: Path) -> None:
    """``extension()`` as the server calls it today binds no profile tool."""
    ext = apps.extension()
    assert [t.fn.__name__ for t in ext.tools()] == []
    assert [r.resource.uri for r in ext.resources()] == [apps.VIEW_URI]
