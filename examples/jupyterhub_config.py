# jupyterhub_config.py: nbrelay for a team on one machine, with JupyterHub's own defaults.
# Users log in with their Unix account and password (PAMAuthenticator); each user's server, its
# kernels and so that user's agent run as that Unix user (LocalProcessSpawner).
#
# Install, then start the Hub as root (it starts each user's server as that user):
#   the Hub:    pip install jupyterhub jupyterhub-idle-culler
#               npm install -g configurable-http-proxy
#   the users:  python3 -m venv /opt/notebook-env
#               /opt/notebook-env/bin/pip install jupyterhub nbrelay jupyter-collaboration
#   run:        jupyterhub -f jupyterhub_config.py
#
# tests/hub/test_documented_config.py runs this very file on a real Hub.
import os
import pwd
import sys

c = get_config()  # noqa: F821  (JupyterHub defines it while it reads this file)

# JupyterHub lets nobody log in until it is told who may: list the users (or use
# c.LocalAuthenticator.allowed_groups = {"notebook-users"}, or c.Authenticator.allow_all = True).
c.Authenticator.allowed_users = {"alice", "bob"}

c.Spawner.cmd = ["/opt/notebook-env/bin/jupyterhub-singleuser"]  # the environment with nbrelay
c.Spawner.default_url = "/lab"


def private_home(spawner):
    """Make the user's home theirs alone (0700) before their server starts.

    An agent runs code as its user, so it can read whatever that user can: with homes others
    may read (0755, useradd's default on Debian), alice's agent could read bob's notebooks."""
    user = pwd.getpwnam(spawner.user.name)
    try:
        os.mkdir(user.pw_dir, 0o700)
        os.chown(user.pw_dir, user.pw_uid, user.pw_gid)
    except FileExistsError:
        pass
    owner = os.stat(user.pw_dir).st_uid
    if owner != user.pw_uid:
        raise RuntimeError(
            f"{user.pw_dir} belongs to uid {owner}, not to {user.pw_name}: give each user a "
            "home of their own"
        )
    os.chmod(user.pw_dir, 0o700)


c.Spawner.pre_spawn_hook = private_home

# Stop servers idle for an hour (agents' MCP calls count as activity). The culler runs in the
# Hub's own Python (sys.executable), where it was installed above.
c.JupyterHub.services = [
    {
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", "--timeout=3600"],
    }
]
c.JupyterHub.load_roles = [
    {
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    }
]
