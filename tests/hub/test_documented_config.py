"""The local JupyterHub deployment of docs/deploy/jupyterhub.md, as written: ``examples/jupyterhub_config.py``.

The documented file is loaded unchanged (``load_subconfig``) after the test's own settings (the
ports, the Hub's database and the proxy under a temporary folder, start timeouts for a loaded
machine); one line of it is then replaced: ``Spawner.cmd``, which names the operator's
environment, points at this test venv's ``jupyterhub-singleuser``. Everything else is what the
file says and JupyterHub's defaults, as on a real machine: PAMAuthenticator checks Unix
passwords, LocalProcessSpawner starts each user's server (and so their kernels) as that Unix
user, and the idle culler is a service the Hub starts.

alice, bob and mallory (a Unix user the file does not allow) are real Unix users to the Hub,
PAM and the kernel: the Hub runs as root in a mount namespace of its own (bubblewrap) in which
/etc/passwd, /etc/group and /etc/shadow are copies of this machine's with the three added, so
nothing on the machine changes. Their homes are made as ``useradd -m`` makes them on Debian:
owned by the user, mode 0755. Needs root (CI runs as root) and bwrap (``scripts/test`` installs
it); the interpreter's folder, when it lies in a folder other users may not enter (a pyenv under
/root), is bound into an empty folder there so the users' servers can run it.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest

from tests.helpers import PATIENCE, call, missing_tool
from tests.hub import conftest
from tests.hub.conftest import Hub, singleuser_command
from tests.hub.test_hub import agent
from tests.servers import running, wait_until

pytestmark = pytest.mark.anyio

DOCUMENTED = conftest.REPO / "examples" / "jupyterhub_config.py"
ALLOWED = ("alice", "bob")
OUTSIDER = "mallory"  # a Unix user with a password whom the documented file does not allow


def prerequisites() -> None:
    conftest.prerequisites()
    if os.geteuid() != 0:
        missing_tool(
            "the documented JupyterHub deployment needs root: the Hub starts each user's "
            "server as that Unix user (CI runs as root)"
        )
    for tool in ("bwrap", "openssl"):
        if shutil.which(tool) is None:
            missing_tool(f"{tool} is missing: `bash scripts/test` installs it")


def password_hash(password: str) -> str:
    """A SHA-512 crypt hash for /etc/shadow."""
    openssl = shutil.which("openssl")
    assert openssl is not None
    done = subprocess.run(
        [openssl, "passwd", "-6", "-stdin"],
        input=password,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def unused_ids(count: int) -> list[int]:
    """Ids no user and no group of this machine has."""
    taken = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    return [i for i in range(20000, 30000) if i not in taken][:count]


def reachable(paths: list[Path]) -> list[str]:
    """bwrap arguments that let every user reach each of ``paths``: a folder on the way that
    others may not enter is replaced by an empty one (tmpfs, 0755) into which the next folder
    on the way is bound from the machine."""
    args: list[str] = []
    for target in paths:
        current = Path("/")
        for name in target.resolve().parts[1:]:
            following = current / name
            if not os.stat(current).st_mode & stat.S_IXOTH:
                for step in (["--tmpfs", str(current)], ["--bind", str(following), str(following)]):
                    if not _contains(args, step):
                        args += step
            current = following
    return args


def _contains(args: list[str], step: list[str]) -> bool:
    return any(args[i : i + len(step)] == step for i in range(len(args)))


@dataclass
class DeployedHub(Hub):
    """The Hub of ``examples/jupyterhub_config.py`` with real Unix users (see the module)."""

    base: Path = Path()
    passwords: dict[str, str] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)

    def config(self) -> str:
        settings: dict[str, Any] = {
            "JupyterHub.ip": "127.0.0.1",
            "JupyterHub.port": self.proxy_port,
            "JupyterHub.hub_ip": "127.0.0.1",
            "JupyterHub.hub_port": self.hub_port,
            "JupyterHub.db_url": f"sqlite:///{self.work / 'jupyterhub.sqlite'}",
            "JupyterHub.cookie_secret_file": str(self.work / "jupyterhub_cookie_secret"),
            "JupyterHub.pid_file": str(self.work / "jupyterhub.pid"),
            "ConfigurableHTTPProxy.command": [str(conftest.PROXY)],
            "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{self.api_port}",
            "ConfigurableHTTPProxy.pid_file": str(self.work / "proxy.pid"),
            "Spawner.start_timeout": int(PATIENCE),
            "Spawner.http_timeout": int(PATIENCE),
        }
        lines = ["c = get_config()  # noqa: F821"]
        lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
        lines.append(f"load_subconfig({str(DOCUMENTED)!r})  # noqa: F821")
        # The one line of the documented file that names a folder of the operator's machine.
        lines.append(f"c.Spawner.cmd = {[str(singleuser_command())]!r}")
        return "\n".join(lines) + "\n"

    def command(self, config: Path) -> list[str]:
        etc = self.base / "etc"
        sandbox = [shutil.which("bwrap") or "bwrap", "--dev-bind", "/", "/"]
        for name in ("passwd", "group", "shadow"):
            sandbox += ["--ro-bind", str(etc / name), f"/etc/{name}"]
        interpreter = Path(os.path.realpath(sys.executable))
        sandbox += reachable([interpreter, Path(sys.base_prefix), Path(sys.prefix), conftest.REPO])
        return [*sandbox, "--cap-add", "ALL", "--", *super().command(config)]

    def make_users(self) -> None:
        """alice, bob and mallory in copies of the machine's user files, homes as useradd -m
        makes them on Debian (owned by the user, 0755)."""
        names = (*ALLOWED, OUTSIDER)
        etc = self.base / "etc"
        etc.mkdir(mode=0o700)
        self.ids = dict(zip(names, unused_ids(len(names)), strict=True))
        self.passwords = {name: secrets.token_urlsafe(12) for name in names}

        def keep(path: str) -> list[str]:
            lines = Path(path).read_text().splitlines()
            return [line for line in lines if line.split(":")[0] not in names]

        passwd, group, shadow = keep("/etc/passwd"), keep("/etc/group"), keep("/etc/shadow")
        self.homes.mkdir(mode=0o755, parents=True)
        for name, uid in self.ids.items():
            home = self.home(name)
            passwd.append(f"{name}:x:{uid}:{uid}::{home}:/bin/sh")
            group.append(f"{name}:x:{uid}:")
            shadow.append(f"{name}:{password_hash(self.passwords[name])}:20000:0:99999:7:::")
            home.mkdir(mode=0o755)
            home.chmod(0o755)
            os.chown(home, uid, uid)
        for name, lines, mode in (
            ("passwd", passwd, 0o644),
            ("group", group, 0o644),
            ("shadow", shadow, 0o600),
        ):
            path = etc / name
            path.write_text("\n".join(lines) + "\n")
            path.chmod(mode)

    def start(self) -> None:
        self.make_users()
        super().start()

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the Hub inside the sandbox (bwrap passes no signal on), then as Hub."""
        if self.proc is not None and self.proc.poll() is None:
            self._record()
            for child in psutil.Process(self.proc.pid).children():
                with contextlib.suppress(psutil.Error):
                    child.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        super().stop(grace)

    # -- what a person does in the browser ------------------------------------------------

    def login(self, name: str, password: str) -> tuple[httpx2.Client, httpx2.Response]:
        """Log in through the Hub's login form: the client (it keeps the session's cookies)
        and the form's answer."""
        http = httpx2.Client(base_url=self.url, timeout=60, follow_redirects=False)
        form = http.get("hub/login")
        assert form.status_code == 200, form.text
        xsrf = http.cookies.get("_xsrf", path="/hub/")
        answer = http.post(
            "hub/login",
            data={"username": name, "password": password, "_xsrf": xsrf or ""},
        )
        http.headers["X-XSRFToken"] = http.cookies.get("_xsrf", path="/hub/") or xsrf or ""
        return http, answer

    def token_of(self, http: httpx2.Client, name: str, scopes: list[str]) -> str:
        """A token the logged-in user makes for themselves (what the Hub's token page does)."""
        made = http.post(
            f"hub/api/users/{name}/tokens",
            json={"note": "agent", "expires_in": 3600, "scopes": scopes},
        )
        assert made.status_code == 201, made.text
        return str(made.json()["token"])


@pytest.fixture(scope="module")
def deployed() -> Iterator[DeployedHub]:
    prerequisites()
    # Under /tmp, not pytest's folder (0700 for root): the users must reach their homes.
    base = Path(tempfile.mkdtemp(prefix="nbrelay-hub-"))
    base.chmod(0o755)
    hub = DeployedHub(work=base / "hub", homes=base / "home", base=base)
    try:
        with running(hub) as started:
            yield started
    finally:
        shutil.rmtree(base, ignore_errors=True)


def logged_in(hub: DeployedHub, name: str) -> tuple[httpx2.Client, str]:
    """Log ``name`` in, start their server and return the session and an agent token."""
    http, answer = hub.login(name, hub.passwords[name])
    assert answer.status_code == 302, (answer.status_code, answer.text[-2000:])
    assert "/hub/login" not in answer.headers["location"], answer.headers["location"]
    status = hub.token_of(http, name, [f"read:servers!user={name}", f"servers!user={name}"])
    headers = {"Authorization": f"token {status}"}
    if not (
        httpx2.get(f"{hub.url}hub/api/users/{name}", headers=headers, timeout=60).json()["servers"]
    ):
        started = httpx2.post(f"{hub.url}hub/api/users/{name}/server", headers=headers, timeout=60)
        assert started.status_code in (201, 202), started.text

    def ready() -> bool:
        model = httpx2.get(f"{hub.url}hub/api/users/{name}", headers=headers, timeout=60).json()
        return bool(model["servers"].get("", {}).get("ready"))

    hub._wait(ready, f"{name}'s server was not ready")
    return http, hub.token_of(http, name, [f"access:servers!user={name}"])


def test_the_documented_users_log_in_and_no_one_else(deployed: DeployedHub) -> None:
    for name in ALLOWED:
        http, _ = logged_in(deployed, name)
        with contextlib.closing(http):
            home = http.get("hub/home")
            assert home.status_code == 200, home.text[-2000:]
    # A Unix user with the right password whom the file does not allow, and a wrong password.
    for name, password in (
        (OUTSIDER, deployed.passwords[OUTSIDER]),
        ("alice", deployed.passwords["bob"]),
    ):
        http, answer = deployed.login(name, password)
        with contextlib.closing(http):
            assert answer.status_code == 403, (name, answer.status_code, answer.headers)
            assert "Invalid username or password" in answer.text
            # Not logged in: the Hub's pages send this client back to the login form.
            home = http.get("hub/home")
            assert home.status_code == 302
            assert "/hub/login" in home.headers["location"]


def test_the_idle_culler_runs_with_the_scopes_it_needs(deployed: DeployedHub) -> None:
    """The culler the file starts is running in the Hub's Python, and its first sweep was
    answered (not 403)."""
    assert deployed.proc is not None

    def culler_asked() -> bool:
        return bool(
            re.search(
                r" 200 GET /hub/api/users\S* \(idle-culler@",
                deployed.log.read_text(errors="replace"),
            )
        )

    wait_until(culler_asked, "the idle culler made no request", seconds=PATIENCE)
    hub = next(
        p
        for p in psutil.Process(deployed.proc.pid).children()
        if "jupyterhub" in " ".join(p.cmdline())
    )
    cullers = [p for p in hub.children() if "jupyterhub_idle_culler" in " ".join(p.cmdline())]
    assert len(cullers) == 1
    assert cullers[0].is_running()
    # Run by the Hub's own Python, where the documented install step put it (no other python3).
    assert cullers[0].cmdline()[0] == hub.cmdline()[0]
    assert not re.search(r" 403 \S+ \S+ \(idle-culler@", deployed.log.read_text(errors="replace"))


READ = """import os, pwd
print(pwd.getpwuid(os.getuid()).pw_name, oct(os.stat(os.path.expanduser('~')).st_mode & 0o777))
for path in ({own!r}, {other!r}):
    try:
        print(path, 'read', len(open(path).read()))
    except PermissionError as e:
        print(path, 'refused', e.errno)
try:
    print('listed', os.listdir({other_home!r}))
except PermissionError as e:
    print('listing refused', e.errno)
"""


async def test_a_users_agent_cannot_read_another_users_notebooks(deployed: DeployedHub) -> None:
    tokens = {}
    for name in ALLOWED:
        http, tokens[name] = logged_in(deployed, name)
        http.close()
    for name in ALLOWED:
        async with agent(deployed, name, tokens[name]) as client:
            await call(client, "create_notebook", path="secret.ipynb", cells=[f"# {name}'s"])
            await call(client, "save_notebook", path="secret.ipynb")
    alice_home, bob_home = deployed.home("alice"), deployed.home("bob")
    source = READ.format(
        own=str(alice_home / "secret.ipynb"),
        other=str(bob_home / "secret.ipynb"),
        other_home=str(bob_home),
    )
    async with agent(deployed, "alice", tokens["alice"]) as client:
        await call(client, "create_notebook", path="peek.ipynb", cells=[source])
        done = await call(client, "execute", path="peek.ipynb", cells="all", wait=PATIENCE)
        assert done["status"] == "done", done
        read = await call(client, "read_cell", path="peek.ipynb", cell=0)
    printed = str(read)
    assert "alice 0o700" in printed, printed
    assert f"{alice_home / 'secret.ipynb'} read" in printed, printed
    assert f"{bob_home / 'secret.ipynb'} refused 13" in printed, printed
    assert "listing refused 13" in printed, printed
    for name in ALLOWED:
        assert stat.S_IMODE(os.stat(deployed.home(name)).st_mode) == 0o700
        assert os.stat(deployed.home(name)).st_uid == deployed.ids[name]
