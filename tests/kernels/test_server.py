"""Running code through a whole server: floods, stdio purity, idle kernels, the warm pool, the
Deno kernel, and a real package install into a throwaway kernel environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import nbformat
import psutil
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client

from nbrelay.kernels.local import LocalKernels
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import call, notebook, write_notebook
from tests.kernels.conftest import eventually, serve, settings_for

pytestmark = pytest.mark.anyio


async def test_an_output_flood_leaves_memory_bounded_and_the_notebook_valid(
    root: Path, tmp_path: Path
) -> None:
    settings = settings_for(root, tmp_path, cell_output_limit=200_000)
    write_notebook(root / "nb.ipynb", notebook("while True:\n    print('x' * 1000)"))
    me = psutil.Process()
    async with serve(settings) as client:
        before = me.memory_info().rss
        with anyio.fail_after(60):
            result = await call(client, "execute", path="nb.ipynb", cells=[0], timeout=5)
        grown = me.memory_info().rss - before
        cell = result["cells"][0]
        assert cell["status"] == "timeout"
        assert len(json.dumps(result)) < settings.output_budget + 2000
        assert grown < 100 * 2**20, f"nbrelay grew by {grown / 2**20:.0f} MB"
    nb = nbformat.read(root / "nb.ipynb", as_version=4)
    nbformat.validate(nb)
    outputs = nb.cells[0].outputs
    text = "".join(o.get("text", "") for o in outputs)
    assert len(text) < 200_000 + 25_000
    assert "dropped; the last 20,000 characters follow] …" in outputs[-2].text
    assert outputs[-1].ename == "KeyboardInterrupt"


async def _line(stream: BufferedByteReceiveStream) -> bytes:
    return await stream.receive_until(b"\n", 10 * 2**20)


async def test_kernel_writes_to_fd1_never_corrupt_the_stdio_transport(
    root: Path, tmp_path: Path
) -> None:
    """A raw stdio client: every line the server writes must be a JSON-RPC message."""
    nb = notebook(
        "import os, subprocess\n"
        "os.write(1, b'kernel fd 1\\n')\n"
        "os.system('echo from a shell')\n"
        "subprocess.run(['echo', 'from a subprocess'])\n"
        "print('printed')"
    )
    nb.data["metadata"]["kernelspec"]["name"] = "fault-chatty"
    write_notebook(root / "nb.ipynb", nb)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    requests: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "execute", "arguments": {"path": "nb.ipynb", "cells": [0]}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {
                "name": "execute",
                "arguments": {"path": "nb.ipynb", "code": "'still fine'"},
            },
        },
    ]
    argv = [sys.executable, "-m", "nbrelay", "serve", "--root", str(root), "--kernel-pool", "0"]
    lines: list[bytes] = []
    async with await anyio.open_process(argv, env=env, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        reader = BufferedByteReceiveStream(proc.stdout)
        try:
            with anyio.fail_after(120):
                for request in requests:
                    await proc.stdin.send(json.dumps(request).encode() + b"\n")
                    if "id" not in request:
                        continue
                    while True:
                        line = await _line(reader)
                        lines.append(line)
                        if json.loads(line).get("id") == request["id"]:
                            break
        finally:
            await proc.stdin.aclose()
            with anyio.move_on_after(15):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
    messages = [json.loads(line) for line in lines]  # every line is JSON
    assert all(m.get("jsonrpc") == "2.0" for m in messages)
    run = messages[-2]["result"]["structuredContent"]
    printed = "".join(o["text"] for o in run["cells"][0]["outputs"])
    assert "printed" in printed
    assert messages[-1]["result"]["structuredContent"]["cells"][0]["outputs"][0]["text"] == (
        "'still fine'"
    )


async def test_idle_kernels_are_shut_down(root: Path, tmp_path: Path) -> None:
    write_notebook(root / "nb.ipynb", notebook("1"))
    async with serve(settings_for(root, tmp_path, kernel_idle_timeout=1.0)) as client:
        await call(client, "execute", path="nb.ipynb", cells=[0])
        pid = (await call(client, "list_kernels"))["kernels"][0]["pid"]

        async def gone() -> bool:  # the session stays listed, as suspended, without a process
            kernels = (await call(client, "list_kernels"))["kernels"]
            return all(k["state"] == "suspended" for k in kernels)

        await eventually(gone, 20)
        await eventually(
            lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", 10
        )


async def test_the_warm_pool_serves_the_first_run_of_a_new_notebook(
    root: Path, tmp_path: Path
) -> None:
    (root / "sub").mkdir()
    write_notebook(root / "a.ipynb", notebook("1"))
    write_notebook(root / "sub" / "b.ipynb", notebook("import os\nos.getcwd()"))
    settings = settings_for(root, tmp_path, kernel_pool=1)
    ws = Workspace(settings, FileStore(root, lock_dir=settings.lock_dir))
    async with Client(build_server(settings, ws)) as client:
        await call(client, "execute", path="a.ipynb", cells=[0])
        kernels = ws.kernels.provider()
        assert isinstance(kernels, LocalKernels)
        await eventually(lambda: len(kernels._pool) == 1, 60)  # refilled in the background
        warm = kernels._pool[0].pid
        result = await call(client, "execute", path="sub/b.ipynb", cells=[0])
        assert result["cells"][0]["outputs"][0]["text"] == repr(str(root / "sub"))
        # the run went to the kernel that was waiting (how fast that is: bench/kernel_ops.py)
        pid = await call(client, "execute", path="sub/b.ipynb", code="import os\nos.getpid()")
        assert int(pid["cells"][0]["outputs"][0]["text"]) == warm


async def test_typescript_runs_on_the_deno_kernel(root: Path, tmp_path: Path) -> None:
    async with serve(settings_for(root, tmp_path)) as client:
        specs = (await call(client, "list_kernels"))["kernelspecs"]
        assert "deno" in [s["name"] for s in specs], "install the nbrelay[deno] extra"
        await call(
            client,
            "create_notebook",
            path="ts.ipynb",
            kernel="deno",
            cells=[
                "const n: number = 6 * 7;\nconsole.log(`n is ${n}`);\nn",
                "throw new Error('boom')",
            ],
        )
        with anyio.fail_after(120):
            result = await call(
                client, "execute", path="ts.ipynb", cells=[":"], stop_on_error=False
            )
        first, second = result["cells"]
        assert first["status"] == "ok"
        texts = [o["text"].strip() for o in first["outputs"]]
        assert texts == ["n is 42", "42"]
        assert second["status"] == "error"
        assert "boom" in second["outputs"][0]["text"]
        kernels = (await call(client, "list_kernels"))["kernels"]
        assert [(k["path"], k["kernel"]) for k in kernels] == [("ts.ipynb", "deno")]
