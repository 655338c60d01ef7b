"""install_packages on real kernels, with packages built here (no network): into the environment
the kernel runs, with progress while pip works and a short result; in nbrelay's own environment
(the default kernel) with nbrelay's own packages held."""

from __future__ import annotations

import base64
import hashlib
import http.server
import importlib.metadata
import json
import os
import secrets
import subprocess
import sys
import sysconfig
import threading
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import call, notebook, write_notebook
from tests.kernels.conftest import serve, settings_for

pytestmark = pytest.mark.anyio


def wheel(folder: Path, name: str, version: str, requires: Sequence[str] = ()) -> Path:
    """A minimal pure-Python wheel of ``name`` (``VALUE = 42``), depending on ``requires``."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}.py": b"VALUE = 42\n",
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: nbrelay-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
    return path


class _Links(http.server.BaseHTTPRequestHandler):
    """pip's --find-links page of a folder of wheels; a wheel is sent only once ``release`` is
    set (so pip is still at work while the test waits for a progress notification)."""

    folder: Path
    release: threading.Event

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[-1]
        if name.endswith(".whl"):
            self.release.wait(120)
            body = (self.folder / name).read_bytes()
            kind = "application/octet-stream"
        else:
            links = "".join(f'<a href="{w.name}">{w.name}</a>' for w in self.folder.glob("*.whl"))
            body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def links(tmp_path: Path) -> Iterator[tuple[str, Path, threading.Event]]:
    """A find-links page on 127.0.0.1 for the wheels in a folder: (its URL, the folder, the
    event that lets the wheels go)."""
    folder = tmp_path / "links"
    folder.mkdir()
    release = threading.Event()
    handler = type("Links", (_Links,), {"folder": folder, "release": release})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/links/", folder, release
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


async def test_a_package_goes_into_the_kernels_own_environment_with_progress(
    root: Path,
    tmp_path: Path,
    links: tuple[str, Path, threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel runs from a venv of its own: the package and its dependency land there (not in
    nbrelay's environment), the kernel imports it without a restart, progress notifications
    name what pip is doing while it works, and the result lists what was installed with its
    version instead of pip's log."""
    url, folder, release = links
    tag = secrets.token_hex(3)
    top, dep = f"probe_top_{tag}", f"probe_dep_{tag}"
    wheel(folder, top, "0.1", [dep])
    wheel(folder, dep, "0.2")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", url)
    venv = tmp_path / "venv"
    with anyio.fail_after(300):
        await anyio.run_process([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    spec_dir = Path(os.environ["JUPYTER_DATA_DIR"]) / "kernels" / "ownenv"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "own environment",
        "language": "python",
        # ipykernel from the test environment, after the venv's own site-packages
        "env": {"PYTHONPATH": sysconfig.get_paths()["purelib"]},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    nb = notebook("1")
    nb.data["metadata"]["kernelspec"]["name"] = "ownenv"
    write_notebook(root / "nb.ipynb", nb)
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        if "running" in (message or ""):  # pip is at work, waiting for the wheel
            release.set()

    async with serve(settings_for(root, tmp_path)) as client:
        with anyio.fail_after(300):
            result = await client.call_tool(
                "install_packages",
                {"path": "nb.ipynb", "packages": [top]},
                progress_callback=on_progress,
            )
        assert not result.is_error, result.content
        done = result.structured_content
        assert done is not None
        assert done == {
            "path": "nb.ipynb",
            "python": str(python),
            "ok": True,
            "installed": [f"{dep} 0.2", f"{top} 0.1"],
        }
        ran = await call(client, "execute", path="nb.ipynb", code=f"import {top}\n{top}.__file__")
        assert str(venv) in ran["cells"][0]["outputs"][0]["text"]
        again = await call(client, "install_packages", path="nb.ipynb", packages=[top])
        assert again == {
            "path": "nb.ipynb",
            "python": str(python),
            "ok": True,
            "unchanged": [f"{top} 0.1"],
        }
    assert messages[0] == f"pip started: {top}"
    assert any(m.startswith("pip running") and top in m for m in messages), messages
    assert list((venv / "lib").glob(f"python3*/site-packages/{top}.py"))
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version(top)  # not in nbrelay's environment


@pytest.fixture
def own_env_probes(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """Two packages for nbrelay's own environment: one that fits, one that needs anyio < 1
    (nbrelay needs anyio 4); uninstalled afterwards."""
    tag = secrets.token_hex(3)
    fits, clashes = f"probe_fits_{tag}", f"probe_clashes_{tag}"
    folder = tmp_path / "wheels"
    wheel(folder, fits, "0.1")
    wheel(folder, clashes, "0.1", ["anyio<1"])
    try:
        yield fits, clashes, folder
    finally:
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-y", "-q", fits, clashes],
            check=False,
            capture_output=True,
            timeout=120,
        )


async def test_in_nbrelays_own_environment_its_packages_are_held(
    root: Path,
    tmp_path: Path,
    own_env_probes: tuple[str, str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default python3 kernel runs the interpreter that runs nbrelay: an install there says
    so and adds the package; one that would downgrade a package nbrelay needs fails, names it,
    shows pip's reason only, and changes nothing."""
    fits, clashes, folder = own_env_probes
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    anyio_before = importlib.metadata.version("anyio")
    write_notebook(root / "nb.ipynb", notebook("1"))
    async with serve(settings_for(root, tmp_path)) as client:
        with anyio.fail_after(300):
            done = await call(
                client,
                "install_packages",
                path="nb.ipynb",
                packages=[f"{fits} @ {(folder / f'{fits}-0.1-py3-none-any.whl').as_uri()}"],
            )
            assert done["ok"]
            assert done["python"] == sys.executable
            assert done["installed"] == [f"{fits} 0.1"]
            assert "nbrelay's own environment" in done["note"]
            assert "log" not in done
            refused = await call(
                client,
                "install_packages",
                path="nb.ipynb",
                packages=[f"{clashes} @ {(folder / f'{clashes}-0.1-py3-none-any.whl').as_uri()}"],
            )
    assert not refused["ok"]
    assert "installed" not in refused
    assert refused["log"].startswith("ERROR: Cannot install")
    assert f"(constraint) anyio=={anyio_before}" in refused["log"]
    assert len(refused["log"]) <= 2000
    assert importlib.metadata.version("anyio") == anyio_before
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version(clashes)
