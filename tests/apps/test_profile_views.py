"""The notebook view for the compatibility profiles: ``apps.VIEW_TOOLS`` names each profile's
tools that show it, and ``server.build_server`` binds them through ``apps.extension``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from nbrelay.config import Settings
from nbrelay.server import build_server, build_workspace
from nbrelay.tools import apps
from tests.apps.test_notebook_view import AppsSupport
from tests.helpers import notebook, text_of, write_notebook

pytestmark = pytest.mark.anyio


def _server(root: Path, profile: str) -> MCPServer[Any]:
    settings = Settings(
        root=root, profile=profile, lock_dir=root.parent / "locks", notebook="a.ipynb"
    )
    return build_server(settings, build_workspace(settings))


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
        # notebook-lr's tools act on the current notebook (here a.ipynb): no path argument
        ("notebook-lr", "list_cells", {}),
    ],
)
async def test_profile_tools_show_the_view(
    tmp_path: Path, profile: str, tool: str, arguments: dict[str, Any]
) -> None:
    root = _root(tmp_path)
    async with Client(_server(root, profile)) as plain:
        unseen = {t.name: t for t in (await plain.list_tools()).tools}
        before = await plain.call_tool(tool, arguments)
    assert not before.is_error, text_of(before)
    # A client without Apps gets the profile's own listing: no view tool, no _meta.ui.
    assert apps.POLL_TOOL not in unseen
    assert all("ui" not in (t.meta or {}) for t in unseen.values())
    assert before.meta is None or apps.VIEW_KEY not in before.meta
    async with Client(_server(root, profile), extensions=[AppsSupport()]) as shows:
        listed = {t.name: t for t in (await shows.list_tools()).tools}
        after = await shows.call_tool(tool, arguments)
        polled = await shows.call_tool(apps.POLL_TOOL, {"path": "a.ipynb"})
    for name in apps.VIEW_TOOLS[profile]:
        assert (listed[name].meta or {}).get("ui") == {"resourceUri": apps.VIEW_URI}, name
    assert listed[apps.POLL_TOOL].meta == apps.POLL_META
    assert sorted(listed) == sorted([*unseen, apps.POLL_TOOL])
    assert text_of(after) == text_of(before)  # the model reads the same
    assert after.meta is not None
    view = after.meta[apps.VIEW_KEY]
    assert view["path"] == "a.ipynb"
    assert [c["source"] for c in view["cells"]] == ["x = 1", "print(x)"]
    assert not polled.is_error, text_of(polled)
    assert polled.meta is not None
    assert polled.meta[apps.VIEW_KEY]["cells"] == view["cells"]


async def test_the_canonical_extension_binds_no_tool_of_its_own(tmp_path: Path) -> None:
    """The canonical tools carry the view's ``_meta`` themselves (``VIEW_META``)."""
    ext = apps.extension()
    assert [t.fn.__name__ for t in ext.tools()] == []
    assert [r.resource.uri for r in ext.resources()] == [apps.VIEW_URI]
