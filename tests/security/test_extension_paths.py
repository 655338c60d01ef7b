"""Path containment in extension mode (plan G1): the attack corpus of ``test_paths.py``
against nbrelay inside a real Jupyter Server with jupyter-collaboration, in every profile, through
the official MCP client over HTTP: every path parameter of every tool and every resource template.

Jupyter's contents manager follows symlinks (a link in its root is served as whatever it points
to), and jupyter-collaboration loads and saves rooms through it: nbrelay must confine every path
it hands to Jupyter as file mode confines its own, whatever tool or profile gives the path. (The
swap race against the same server is measured by ``bench/extension_swap_race.py``.)
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from nbrelay.server import PROFILES
from tests.extension.conftest import ext_client, make_server
from tests.http.harness import report
from tests.live.server import JupyterServer
from tests.security.surface import Tool, baseline, everything_said, refused
from tests.security.test_paths import (
    VALID,
    Layout,
    _expand,
    attacks,
    harmless_here,
    make_layout,
)
from tests.servers import running

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@contextlib.contextmanager
def serving(root: Path, work: Path, profile: str) -> Iterator[JupyterServer]:
    """nbrelay's extension in a Jupyter Server whose root is ``root``, in ``profile``."""
    server = make_server(work, root=root, args=[f"--NbrelayExtension.profile={profile}"])
    with running(server):
        yield server


@contextlib.asynccontextmanager
async def connected(
    server: JupyterServer, profile: str
) -> AsyncIterator[tuple[Client, list[Tool]]]:
    """The MCP client on the server, and the profile's tools that take paths."""
    async with ext_client(server) as client:
        tools = []
        for t in (await client.list_tools()).tools:
            hints = t.annotations
            kind = "read" if hints is not None and hints.read_only_hint else "write"
            tool = Tool(profile, t.name, dict(t.input_schema), kind)
            if tool.path_params:
                tools.append(tool)
        yield client, tools


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return make_layout(tmp_path_factory.mktemp("ext-paths"))


@pytest.mark.parametrize("profile", PROFILES)
async def test_every_attack_path_is_refused_by_every_path_tool_in_extension_mode(
    profile: str,
    layout: Layout,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    paths = attacks(layout)
    before = layout.outside_digest()
    failures: list[str] = []
    calls = refusals = inside = reads = 0
    templates: list[str] = []
    with serving(layout.root, tmp_path / "server", profile) as server:
        async with connected(server, profile) as (client, mine):
            if profile != "srcbook":
                assert mine, f"no {profile} tool takes a path in extension mode"
            for tool in mine:
                for param in tool.path_params:
                    for attack in paths:
                        args = baseline(tool, VALID)
                        args[param] = attack
                        with anyio.fail_after(120):
                            result = await client.call_tool(tool.name, args)
                        calls += 1
                        said = everything_said(result)
                        if refused(result):
                            refusals += 1
                        elif harmless_here(profile, attack):
                            inside += 1
                        else:
                            failures.append(f"{tool.id} {param}={attack[:60]!r} was not refused")
                        leaked = [c for c in layout.canaries if c in said] + (
                            ["/etc/passwd"] if "root:x:0:0" in said else []
                        )
                        if leaked:
                            failures.append(f"{tool.id} {param}={attack[:60]!r} leaked {leaked}")
                        if "internal error" in said or "Traceback" in said:
                            failures.append(
                                f"{tool.id} {param}={attack[:60]!r} crashed: {said[:200]}"
                            )
            # The same attacks through every resource template that takes a path.
            templates = [
                t.uri_template
                for t in (await client.list_resource_templates()).resource_templates
                if re.search(r"\{\+?path\}", t.uri_template)
            ]
            for template in templates:
                for attack in paths:
                    uri = _expand(template, attack)
                    reads += 1
                    try:
                        with anyio.fail_after(120):
                            said = json.dumps((await client.read_resource(uri)).model_dump())
                    except MCPError as exc:
                        said = str(exc)
                    else:
                        failures.append(f"{uri[:90]!r} was not refused")
                    if [c for c in layout.canaries if c in said] or "root:x:0:0" in said:
                        failures.append(f"{uri[:90]!r} leaked")
    after = layout.outside_digest()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    leaks = sum("leaked" in f for f in failures)
    report(
        request,
        f"G1 extension {profile}: {len(paths)} attack paths x {len(mine)} path tools = {calls} "
        f"calls: {refusals} refused"
        + (f", {inside} read as paths inside the root by the seed's convention" if inside else "")
        + f"; {reads} resource reads of {len(templates)} path templates; {leaks} read canaries, "
        f"{len(changed)} files outside the root changed",
    )
    assert not changed, f"files outside the root or hidden changed: {changed}"
    assert not failures, f"{len(failures)} of {calls} calls: " + "\n".join(failures[:40])


async def test_a_notebook_swapped_for_a_link_out_of_the_root_after_its_room_opened_is_refused(
    tmp_path: Path,
) -> None:
    """The room of a notebook nbrelay works on stays open between calls: the file swapped for a
    symlink out of the root meanwhile is refused on the next read, edit and save, as a path
    is when the room opens (the room saves through the contents manager, which follows links)."""
    import nbformat

    from tests.helpers import call, call_error, notebook, write_notebook

    root, outside = tmp_path / "root", tmp_path / "outside.ipynb"
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    write_notebook(outside, notebook("canary-outside"))
    with serving(root, tmp_path / "server", "canonical") as server:
        async with ext_client(server) as client:
            await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
            (root / "n.ipynb").unlink()
            (root / "n.ipynb").symlink_to(outside)
            for tool, args in (
                ("read_notebook", {}),
                ("edit_cell", {"cell": "c0", "source": "a2"}),
                ("save_notebook", {}),
            ):
                with anyio.fail_after(120):
                    said = await call_error(client, tool, path="n.ipynb", **args)
                assert "leads outside the root folder" in said, (tool, said)
                assert "canary-outside" not in said
    assert [c.source for c in nbformat.read(str(outside), as_version=4).cells] == ["canary-outside"]
