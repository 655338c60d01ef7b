"""A real JupyterHub for the deployment tests: two users, each with their own single-user server.

The Hub (``python -m jupyterhub``) runs on 127.0.0.1 with its proxy (configurable-http-proxy from
npm, installed into ``.tools`` by ``scripts/test``) on three free ports: the public proxy port,
the proxy's API port and the Hub's own port. Users log in with JupyterHub's
SharedPasswordAuthenticator (its DummyAuthenticator's successor: one shared password, and only
``alice`` and ``bob`` are allowed); their servers are started by
SimpleLocalProcessSpawner as ``jupyterhub-singleuser`` from this test venv, so they load exactly
what is installed here (JupyterLab, jupyter-collaboration, nbrelay's server extension), as the
same OS user, with a home folder under the test's temporary folder.

The harness talks to the Hub's REST API with a service token it configures (``api_tokens`` of a
service with an admin role): it starts the servers, mints each user's agent token (scope
``access:servers!user=<name>``) and reads each server's process id. Every wait is bounded and
polls a condition. ``stop`` ends the Hub by PID (SIGTERM: it stops the servers it spawned and its
proxy), then kills by PID whatever it started that is still alive: the proxy, the single-user
servers and their kernels (which run in sessions of their own, so no process group covers them).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest

from tests.helpers import PATIENCE, missing_tool
from tests.http.harness import summarize
from tests.servers import free_port, running, start_logged, stop_by_pid, tail, wait_until

REPO = Path(__file__).resolve().parents[2]
PROXY = REPO / ".tools" / "node_modules" / ".bin" / "configurable-http-proxy"
USERS = ("alice", "bob")
SERVICE = "nbrelay-test-admin"
# Only what the harness needs: make users' servers, mint their tokens, read their state (pids).
SERVICE_SCOPES = ["admin:users", "admin:servers", "admin:server_state", "tokens", "list:users"]


def singleuser_command() -> Path:
    """``jupyterhub-singleuser`` from this venv (the single-user image of the tests)."""
    return Path(sys.executable).parent / "jupyterhub-singleuser"


def prerequisites() -> None:
    """Fail (skip only when run by hand outside the full suite) naming what is missing."""
    if not os.access(PROXY, os.X_OK):
        missing_tool(
            f"{PROXY} is missing: JupyterHub needs configurable-http-proxy; run "
            "`bash scripts/test` (it installs the Node tools into .tools)"
        )
    command = singleuser_command()
    if not os.access(command, os.X_OK):
        pytest.fail(f"{command} is missing: install the test extra (jupyterhub)")


def _config(hub: Hub) -> str:
    """jupyterhub_config.py for the test Hub (every value a Python literal)."""
    env_keep = ["PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV"]
    settings: dict[str, Any] = {
        "JupyterHub.ip": "127.0.0.1",
        "JupyterHub.port": hub.proxy_port,
        "JupyterHub.hub_ip": "127.0.0.1",
        "JupyterHub.hub_port": hub.hub_port,
        "JupyterHub.db_url": f"sqlite:///{hub.work / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(hub.work / "jupyterhub_cookie_secret"),
        "JupyterHub.pid_file": str(hub.work / "jupyterhub.pid"),
        "JupyterHub.authenticator_class": "shared-password",
        "JupyterHub.spawner_class": "simple",
        "JupyterHub.cleanup_servers": True,
        "JupyterHub.services": [{"name": SERVICE, "api_token": hub.admin_token}],
        "JupyterHub.load_roles": [
            {"name": "nbrelay-test-admin", "scopes": SERVICE_SCOPES, "services": [SERVICE]}
        ],
        "ConfigurableHTTPProxy.command": [str(PROXY)],
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{hub.api_port}",
        "ConfigurableHTTPProxy.pid_file": str(hub.work / "proxy.pid"),
        "ConfigurableHTTPProxy.should_start": True,
        "SharedPasswordAuthenticator.user_password": hub.password,
        "Authenticator.allowed_users": set(USERS),
        "SimpleLocalProcessSpawner.home_dir_template": str(hub.homes / "{username}"),
        "Spawner.cmd": [str(singleuser_command())],
        # CI runs as root; the Hub stops a server with SIGINT, which a Jupyter Server only
        # answers at once with answer_yes (else it asks on stdin and waits for SIGTERM).
        "Spawner.args": ["--ServerApp.allow_root=True", "--ServerApp.answer_yes=True"],
        "Spawner.env_keep": env_keep,
        "Spawner.environment": {"PYTHONUNBUFFERED": "1"},
        "Spawner.start_timeout": int(PATIENCE),
        "Spawner.http_timeout": int(PATIENCE),
    }
    for key, value in hub.extra.items():  # lists and dicts extend the harness's own
        if isinstance(value, list):
            value = [*settings.get(key, []), *value]
        elif isinstance(value, dict):
            value = {**settings.get(key, {}), **value}
        settings[key] = value
    lines = ["c = get_config()  # noqa: F821"]
    for key, value in settings.items():
        section, name = key.split(".")
        lines.append(f"c.{section}.{name} = {value!r}")
    return "\n".join(lines) + "\n"


@dataclass
class Hub:
    """A running JupyterHub; ``url`` is the public (proxy) address and ends with ``/``."""

    work: Path
    homes: Path
    proxy_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    hub_port: int = field(default_factory=free_port)
    admin_token: str = field(default_factory=lambda: secrets.token_hex(32))
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    # More settings for jupyterhub_config.py (lists and dicts extend the harness's own).
    extra: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    # Every process the Hub started, recorded while it runs, so teardown can end them by PID.
    started: dict[int, psutil.Process] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}/"

    @property
    def log(self) -> Path:
        return self.work / "jupyterhub.log"

    def user_url(self, name: str) -> str:
        return f"{self.url}user/{name}/"

    def home(self, name: str) -> Path:
        return self.homes / name

    def tail(self, lines: int = 60) -> str:
        return tail(self.log, lines)

    # -- the Hub's REST API, as the admin service ------------------------------------------

    def api(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx2.request(
            method,
            f"{self.url}hub/api/{path}",
            headers={"Authorization": f"token {self.admin_token}"},
            json=body,
            timeout=30,
        )
        if response.status_code >= 400:
            raise RuntimeError(
                f"{method} hub/api/{path} answered {response.status_code}: {response.text}"
            )
        return response.json() if response.content else None

    def server(self, name: str) -> dict[str, Any] | None:
        model = self.api("GET", f"users/{name}")
        server: dict[str, Any] | None = model.get("servers", {}).get("")
        return server

    def token(self, name: str, scopes: list[str] | None = None) -> str:
        """A new API token of user ``name`` (by default: access to their own server only)."""
        body = {
            "note": "nbrelay agent",
            "expires_in": 3600,
            "scopes": scopes or [f"access:servers!user={name}"],
        }
        return str(self.api("POST", f"users/{name}/tokens", body)["token"])

    def server_pid(self, name: str) -> int:
        server = self.server(name)
        if server is None:
            raise RuntimeError(f"{name} has no running server")
        return int(server["state"]["pid"])

    # -- life cycle -------------------------------------------------------------------------

    def config(self) -> str:
        """The text of the Hub's ``jupyterhub_config.py``."""
        return _config(self)

    def command(self, config: Path) -> list[str]:
        """The command line that runs the Hub with ``config``."""
        return [sys.executable, "-m", "jupyterhub", "-f", str(config)]

    def start(self) -> None:
        for folder in (self.work, self.homes):
            folder.mkdir(parents=True, exist_ok=True)
        config = self.work / "jupyterhub_config.py"
        config.write_text(self.config())
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("JUPYTER", "NBRELAY_", "JPY_", "CONFIGPROXY"))
        }
        # The proxy is a Node script (`#!/usr/bin/env node`): use the Node installed beside it.
        env["PATH"] = os.pathsep.join(
            [str(PROXY.parent), str(Path(sys.executable).parent), env.get("PATH", "")]
        )
        env["PYTHONUNBUFFERED"] = "1"
        # JupyterHub gives its Node proxy a fixed 10 s to answer, then exits ("Failed to start
        # proxy"): seen on a loaded 2-core run. That start is made once more, then it fails.
        for attempt in (1, 2):
            self.proc = start_logged(self.command(config), cwd=self.work, env=env, log=self.log)
            try:
                self._wait(self._answers, "the Hub did not answer on its public port")
                return
            except RuntimeError:
                if attempt == 2 or "Failed to start proxy" not in self.tail():
                    raise
                self.stop()

    def _answers(self) -> bool:
        try:
            response = httpx2.get(f"{self.url}hub/api/", timeout=5)
        except httpx2.HTTPError:
            return False
        return response.status_code == 200

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        """Wait until ``ready()``, remembering every process the Hub starts meanwhile."""

        def check() -> bool:
            done = ready()
            self._record()
            return done

        wait_until(check, what, seconds=PATIENCE, proc=self.proc, log=self.tail)

    def _record(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Remember every process the Hub started (proxy, servers, kernels) by PID."""
        proc = proc or self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(proc.pid).children(recursive=True):
                self.started.setdefault(child.pid, child)

    def spawn(self, *names: str) -> None:
        """Start these users' servers through the Hub API (together) and wait until each is
        ready."""
        for name in names:
            self.api("POST", f"users/{name}/server")

        def ready() -> bool:
            return all((s := self.server(name)) and s.get("ready") for name in names)

        self._wait(ready, f"the servers of {', '.join(names)} were not ready")

    def stop(self, grace: float = 30.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        self._record(proc)
        stop_by_pid(proc, grace=grace, kill_group=True)
        # What the Hub did not stop on its way out (psutil checks each is still the same process).
        left = [p for p in self.started.values() if p.is_running()]
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(left, timeout=10)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    summarize(terminalreporter, "tests/hub/")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """A running Hub with alice's and bob's servers started."""
    prerequisites()
    base = tmp_path_factory.mktemp("hub")
    with running(Hub(work=base / "hub", homes=base / "home")) as started:
        started.spawn(*USERS)
        yield started


def user_headers(token: str, scheme: str = "token") -> dict[str, str]:
    return {"Authorization": f"{scheme} {token}"}


def notebook_json(source: str) -> dict[str, Any]:
    """A contents-API model of a one-cell notebook."""
    cell: dict[str, Any] = {
        "cell_type": "code",
        "id": "c0",
        "source": source,
        "metadata": {},
        "outputs": [],
        "execution_count": None,
    }
    content = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}
    return {"type": "notebook", "format": "json", "content": content}
