"""A read-only user of someone's server, as JupyterHub grants one: custom scopes
(``custom:jupyter_server:<action>:*``) that the single-user server's authorizer maps to Jupyter
Server's permissions, the way JupyterHub documents "read-only access to user servers".

bob holds ``access:servers!user=alice`` and ``custom:jupyter_server:read:*!user=alice``: he may
reach alice's server and read her notebooks, nothing else. nbrelay asks the same authorizer
before every operation, so his agent reads and is refused every change, saving included.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.helpers import PATIENCE, call, call_error
from tests.hub.conftest import Hub, prerequisites
from tests.hub.test_hub import agent, require_mcp, stored_sources
from tests.live.server import wait_for
from tests.servers import running

pytestmark = pytest.mark.anyio

# The single-user server's authorizer: an action on a resource is allowed when the caller's Hub
# scopes hold custom:jupyter_server:<action>:<resource> (or :*) for this server's owner.
AUTHORIZER = """
import os

from jupyterhub.singleuser.extension import JupyterHubAuthorizer


class ByScope(JupyterHubAuthorizer):
    def is_authorized(self, handler, user, action, resource):
        owner = os.environ["JUPYTERHUB_USER"]
        wanted = {
            f"custom:jupyter_server:{action}:{what}!user={owner}" for what in (resource, "*")
        }
        return bool(self.hub_auth.check_scopes(wanted, user.hub_user))
"""

SCOPES = {
    "custom:jupyter_server:read:*": {"description": "read a server's files and kernels"},
    "custom:jupyter_server:write:*": {
        "description": "change a server's files",
        "subscopes": ["custom:jupyter_server:read:*"],
    },
    "custom:jupyter_server:execute:*": {
        "description": "run code on a server",
        "subscopes": ["custom:jupyter_server:write:*", "custom:jupyter_server:read:*"],
    },
}
PYTHONPATH = os.environ.get("PYTHONPATH", "")
OWN = ["access:servers!user=alice", "custom:jupyter_server:execute:*!user=alice"]
READ_ONLY = ["access:servers!user=alice", "custom:jupyter_server:read:*!user=alice"]


@pytest.fixture(scope="module")
def granular_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    prerequisites()
    base = tmp_path_factory.mktemp("hub-read-only")
    modules = base / "modules"
    modules.mkdir()
    (modules / "nbrelay_hub_authz.py").write_text(AUTHORIZER)
    hub = Hub(
        work=base / "hub",
        homes=base / "home",
        extra={
            "JupyterHub.custom_scopes": SCOPES,
            "JupyterHub.load_roles": [
                {"name": "user", "scopes": ["self", "custom:jupyter_server:execute:*!user"]},
                {"name": "reads-alices-server", "scopes": READ_ONLY, "users": ["bob"]},
            ],
            "Spawner.args": ["--ServerApp.authorizer_class=nbrelay_hub_authz.ByScope"],
            # The authorizer's module, before whatever PYTHONPATH the servers already get.
            "Spawner.environment": {
                "PYTHONPATH": os.pathsep.join(filter(None, [str(modules), PYTHONPATH]))
            },
        },
    )
    with running(hub) as started:
        started.spawn("alice")
        yield started


async def test_a_read_only_user_reads_but_cannot_save_or_change_a_notebook(
    granular_hub: Hub,
) -> None:
    hub = granular_hub
    mine, reader = hub.token("alice", OWN), hub.token("bob", READ_ONLY)
    require_mcp(hub, "alice", mine)
    path = hub.home("alice") / "shared.ipynb"
    async with agent(hub, "alice", mine) as alice:
        await call(alice, "create_notebook", path="shared.ipynb", cells=["a = 1"])
        await call(alice, "edit_cell", path="shared.ipynb", cell=0, source="a = 2")
        await call(alice, "save_notebook", path="shared.ipynb")
    await wait_for(lambda: stored_sources(path) == ["a = 2"], seconds=PATIENCE)
    written = path.read_bytes(), path.stat().st_mtime_ns
    async with agent(hub, "alice", reader) as bob:
        read = await call(bob, "read_notebook", path="shared.ipynb")
        assert [c["source"] for c in read["cells"]] == ["a = 2"]
        not_saved = await call_error(bob, "save_notebook", path="shared.ipynb")
        assert "contents:write" in not_saved, not_saved
        not_edited = await call_error(bob, "edit_cell", path="shared.ipynb", cell=0, source="x")
        assert "contents:write" in not_edited, not_edited
        not_run = await call_error(bob, "execute", path="shared.ipynb", code="1")
        assert "kernels:execute" in not_run, not_run
    assert (path.read_bytes(), path.stat().st_mtime_ns) == written
