"""A real Jupyter Server (JupyterLab + jupyter-collaboration) for the live-mode tests.

It listens on 127.0.0.1 on a free port with a fixed token and serves a temporary root. Its
configuration, data, runtime folders, collaboration session store and YStore all live in a
temporary work folder, never in the repository. ``stop`` ends it by PID: SIGTERM to its process
group, then SIGKILL after a grace period (a server with RTC clients connected can hang on
SIGTERM). ``free_port`` and ``wait_for`` are the suite's own (``tests.servers``), named here too
for the live tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import free_port as free_port
from tests.servers import start_logged, stop_by_pid, tail, wait_until
from tests.servers import wait_for as wait_for

TOKEN = "nbrelay-test-token"  # a fixed token for a loopback test server


def _user_settings(folder: Path) -> None:
    """JupyterLab settings for a quiet test browser: no news, no update checks."""
    notification = (
        folder / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    )
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))


@dataclass
class JupyterServer:
    """A running server; ``url`` ends with ``/``."""

    root: Path
    work: Path
    port: int
    collaboration: bool = True
    kind: str = "lab"
    token: str = TOKEN
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    extra_args: list[str] = field(default_factory=list)
    # Whether nbrelay's server extension runs (None: as the environment's config says).
    nbrelay: bool | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def log(self) -> Path:
        return self.work / "server.log"

    def _command(self) -> list[str]:
        if self.kind == "gateway":
            # Listing kernels is on unless the test says otherwise (the gateway's default: off).
            listing = (
                []
                if any("list_kernels" in a for a in self.extra_args)
                else ["--JupyterWebsocketPersonality.list_kernels=True"]
            )
            return [
                sys.executable,
                "-m",
                "kernel_gateway",
                "--KernelGatewayApp.ip=127.0.0.1",
                f"--KernelGatewayApp.port={self.port}",
                "--KernelGatewayApp.port_retries=0",
                f"--KernelGatewayApp.auth_token={self.token}",
                "--KernelGatewayApp.allow_origin=",
                *listing,
                *self.extra_args,
            ]
        if self.kind == "enterprise-gateway":
            from tests.live.enterprise_gateway import ensure

            return [
                str(ensure()),
                "--ip=127.0.0.1",
                f"--port={self.port}",
                "--port_retries=0",
                f"--EnterpriseGatewayApp.auth_token={self.token}",
                *self.extra_args,
            ]
        python = sys.executable
        if self.kind.startswith("collaboration-"):  # JupyterLab with an older release of it
            from tests.live.older_collaboration import ensure as older

            python = str(older(self.kind.removeprefix("collaboration-")))
        elif self.kind == "server-documents":  # JupyterLab with jupyter-server-documents
            from tests.live.server_documents import ensure as server_documents

            python = str(server_documents())
        args = [
            python,
            "-m",
            "jupyter_server" if self.kind == "server" else "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            "--allow-root",
            f"--ServerApp.root_dir={self.root}",
            f"--IdentityProvider.token={self.token}",
            f"--YDocExtension.session_store_path={self.work / 'collaboration_sessions.json'}",
            f"--SQLiteYStore.db_path={self.work / 'ystore.db'}",
            "--ServerApp.shutdown_no_activity_timeout=0",
        ]
        return [*args, *self.extra_args]

    def start(self, timeout: float = 90.0) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBRELAY_", "JPY_"))
        }
        env.update(
            JUPYTER_CONFIG_DIR=str(self.work / "config"),
            JUPYTER_DATA_DIR=str(self.work / "data"),
            JUPYTER_RUNTIME_DIR=str(self.work / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(self.work / "lab-settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(self.work / "lab-workspaces"),
            IPYTHONDIR=str(self.work / "ipython"),
            PYTHONUNBUFFERED="1",
        )
        _user_settings(self.work / "lab-settings")
        # Language servers are not needed (and looking for them is slow).
        extensions = {"jupyter_lsp": False}
        if not self.collaboration:
            extensions["jupyter_server_ydoc"] = False
        if self.nbrelay is not None:
            extensions["nbrelay"] = self.nbrelay
        config = self.work / "config" / "jupyter_server_config.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"ServerApp": {"jpserver_extensions": extensions}}))
        self.proc = start_logged(self._command(), cwd=self.work, env=env, log=self.log)
        self.starts += 1
        try:
            wait_until(
                self._answers,
                "the Jupyter server did not start",
                seconds=timeout,
                proc=self.proc,
                log=self.tail,
            )
        except RuntimeError:
            self.stop()
            raise

    def _answers(self) -> bool:
        status = "api/kernelspecs" if "gateway" in self.kind else "api/status"
        request = urllib.request.Request(  # noqa: S310 - a loopback http URL
            self.url + status, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as resp:  # noqa: S310
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the server's process group, then SIGKILL after ``grace`` seconds; kernels the
        server started run in its process group: none is left."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_by_pid(proc, grace=grace, term_group=True, kill_group=True)

    def kill(self) -> None:
        """SIGKILL the server at once (a crash)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()
