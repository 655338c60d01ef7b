"""Durability (plan A): kill -9 mid-write, failed writes, acknowledged means on disk, metadata.

The kill test forks writers from a pre-imported "zygote" process, so each of the 200 rounds costs
a fork instead of an interpreter start. Each writer runs the real save path (Editing.edit_cell on
the file store) in a loop on a 3 MB notebook and appends "ack K" to a file after each edit
returns; the test SIGKILLs it at a uniformly random moment. The file must then be byte for byte
the image of the last acknowledged edit or of the one in flight, never anything else.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from mcp import Client, StdioServerParameters

from nbrelay.caller import ANYONE
from nbrelay.notebook.model import new_cell, new_notebook, parse, serialize
from nbrelay.stores.files import FileStore
from tests.helpers import call, call_error, notebook, text_of, write_notebook
from tests.http.harness import report, server_env, size
from tests.servers import stop_by_pid

KILLS = size(200, 1000)
PAD = "y" * 11_000
CELLS = 280

ZYGOTE = r"""
import os, sys
import anyio
from pathlib import Path
from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.notebook import validate
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace

root, lock_dir = Path(sys.argv[1]), Path(sys.argv[2])
PAD = "z" * 20_000
WRITER = Caller("writer")
for ref in (None, "code_cell", "markdown_cell", "raw_cell"):
    validate._compiled(ref)  # compiled once here, inherited by every forked writer

def writer(ack_path, start):
    ws = Workspace(Settings(root=root, lock_dir=lock_dir), FileStore(root, lock_dir=lock_dir))

    async def loop():
        with open(ack_path, "a", buffering=1) as ack:
            ack.write("ready\n")
            k = start
            while True:
                k += 1
                await ws.editing.edit_cell("big.ipynb", WRITER, "c0", source=f"iteration {k}\n{PAD}")
                ack.write(f"ack {k}\n")

    anyio.run(loop)

for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "fork":
        pid = os.fork()
        if pid == 0:
            try:
                writer(args[0], int(args[1]))
            finally:
                os._exit(1)
        print(pid, flush=True)
    elif cmd == "reap":
        _, status = os.waitpid(int(args[0]), 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
"""


@functools.cache
def _base() -> bytes:
    cells = [new_cell("code", "iteration 0\n" + "z" * 20_000, "c0")]
    cells += [new_cell("code", f"cell {i}\n{PAD}", f"c{i + 1}") for i in range(CELLS)]
    return serialize(new_notebook(cells))


def image(k: int) -> bytes:
    """The exact bytes nbrelay writes for iteration ``k`` (only cell 0's first line differs)."""
    base = _base()
    assert base.count(b'"iteration 0\\n"') == 1
    return base.replace(b'"iteration 0\\n"', f'"iteration {k}\\n"'.encode())


ITERATION = re.compile(rb'"iteration (\d+)\\n"')


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def zygote(root: Path, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    script = tmp_path / "zygote.py"
    script.write_text(ZYGOTE)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(root), str(tmp_path / "locks")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=server_env(None),
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.close()
        stop_by_pid(proc)
        proc.stdout.close()


def _ask(proc: subprocess.Popen[str], line: str) -> str:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def _wait_for(path: Path, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"writer never said {text!r}"
        time.sleep(0.002)


def test_kill_9_mid_write_leaves_the_old_or_new_notebook_byte_for_byte(
    zygote: subprocess.Popen[str], root: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    nb_path = root / "big.ipynb"
    nb_path.write_bytes(image(0))
    assert 3_000_000 < len(image(0)) < 4_000_000
    # image(k) is the real store's output: check it once against a parse + edit + serialize.
    nb = parse(image(0))
    nb.cells[0]["source"] = "iteration 7\n" + "z" * 20_000
    assert serialize(nb) == image(7)
    nbformat.validate(nbformat.reads(image(7).decode(), as_version=4))
    rng = random.Random(2026)
    current = 0
    in_flight = 0  # kills where the file was the image of the unacknowledged edit
    left_temp = 0
    acknowledged = 0
    for round_ in range(KILLS):
        ack_path = tmp_path / f"ack-{round_}"
        pid = int(_ask(zygote, f"fork {ack_path} {current}"))
        _wait_for(ack_path, "ready")
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(pid, signal.SIGKILL)
        assert _ask(zygote, f"reap {pid}") == str(-signal.SIGKILL)
        acks = [int(line.split()[1]) for line in ack_path.read_text().split("\n") if "ack" in line]
        last_ack = acks[-1] if acks else current
        acknowledged += len(acks)
        raw = nb_path.read_bytes()
        found = ITERATION.search(raw)
        assert found, f"round {round_}: the notebook lost its first cell"
        k = int(found.group(1))
        assert k in (last_ack, last_ack + 1), (round_, k, last_ack)
        assert raw == image(k), f"round {round_}: iteration {k} is not byte-identical"
        in_flight += k == last_ack + 1
        current = k
        temps = temp_files(root)
        left_temp += bool(temps)
        assert len(temps) <= 1, temps  # a restart sweeps the previous one
    # A restart (a new store) lists only the notebook and removes what the last kill left.
    nbformat.validate(nbformat.reads(nb_path.read_text(), as_version=4))
    store = FileStore(root, lock_dir=tmp_path / "locks")
    listed = anyio.run(lambda: store.list("", ANYONE, recursive=True))
    assert [e.path for e in listed] == ["big.ipynb"]
    anyio.run(store.load, "big.ipynb", ANYONE)
    assert temp_files(root) == []
    report(
        request,
        f"A1: {KILLS}/{KILLS} kills left a valid notebook, byte-identical to the old or new "
        f"image ({in_flight} the in-flight edit, {KILLS - in_flight} the last acknowledged); "
        f"{left_temp} left a temp file, all removed on restart and none listed; "
        f"{acknowledged} acknowledged edits, all on disk.",
    )


FSIZE_SERVER = r"""
import os, resource, signal, sys
limit = int(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
os.execv(sys.executable, [sys.executable, "-m", "nbrelay", "serve", *sys.argv[2:]])
"""


@pytest.mark.anyio
async def test_a_write_that_fails_midway_leaves_the_original_intact(
    root: Path, tmp_path: Path
) -> None:
    """RLIMIT_FSIZE makes the temp-file write fail with EFBIG part way through (as a full disk
    would); as root, permission-based failures cannot be caused, so this is the real fault."""
    rng = random.Random(11)
    limit = 200_000
    script = tmp_path / "fsize.py"
    script.write_text(FSIZE_SERVER)
    originals: dict[str, bytes] = {}
    for n in range(10):
        # Each notebook is under the limit now; the edit pushes it over at a random point.
        body = "a" * rng.randrange(limit // 3, limit - 20_000)
        write_notebook(root / f"n{n}.ipynb", notebook(body))
        originals[f"n{n}.ipynb"] = (root / f"n{n}.ipynb").read_bytes()
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(script), str(limit), "--root", str(root), "--lock-dir", str(tmp_path / "l")],
        env=server_env(None),
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            for n in range(10):
                name = f"n{n}.ipynb"
                # The new file passes the limit at a random point between 1/2 and all of it.
                grow = "b" * (limit + rng.randrange(1, limit))
                err = await call_error(client, "edit_cell", path=name, cell=0, source=grow)
                assert "File too large (errno 27)" in err
                assert name in err
                assert "Nothing was changed" in err
                assert (root / name).read_bytes() == originals[name]
                assert temp_files(root) == []
            # A write that fits still works afterwards.
            done = await call(client, "edit_cell", path="n0.ipynb", cell=0, source="small")
            assert done["version"]
    assert parse((root / "n0.ipynb").read_bytes()).cells[0]["source"] == "small"


READER = r"""
import json, sys
from nbrelay.notebook.model import parse
print(json.dumps([c["source"] for c in parse(open(sys.argv[1], "rb").read()).cells]))
"""


@pytest.mark.anyio
async def test_every_acknowledged_edit_is_on_disk_for_other_processes(
    root: Path, tmp_path: Path
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(root), "--lock-dir", str(tmp_path / "l")],
        env=server_env(None),
    )
    rng = random.Random(5)
    expected: list[str] = []
    edits = size(100, 1000)
    with anyio.fail_after(300):
        async with Client(params) as client:
            await call(client, "create_notebook", path="acked.ipynb")
            for n in range(edits):
                text = f"edit {n} {rng.random()}"
                if expected and rng.random() < 0.3:
                    i = rng.randrange(len(expected))
                    await call(client, "edit_cell", path="acked.ipynb", cell=i, source=text)
                    expected[i] = text
                else:
                    await call(client, "insert_cells", path="acked.ipynb", cells=[text])
                    expected.append(text)
                # This test process is another process than the server that acknowledged.
                on_disk = [c["source"] for c in parse((root / "acked.ipynb").read_bytes()).cells]
                assert on_disk == expected, n
    script = tmp_path / "reader.py"
    script.write_text(READER)
    with anyio.fail_after(60):
        fresh = await anyio.run_process([sys.executable, str(script), str(root / "acked.ipynb")])
    assert json.loads(fresh.stdout) == expected


@pytest.mark.anyio
async def test_file_metadata_is_preserved(root: Path, tmp_path: Path) -> None:
    from nbrelay.config import Settings
    from nbrelay.server import build_server

    write_notebook(root / "odd.ipynb", notebook("a"))
    os.chmod(root / "odd.ipynb", 0o701)
    write_notebook(root / "real.ipynb", notebook("r"))
    os.symlink("real.ipynb", root / "alias.ipynb")
    async with Client(build_server(Settings(root=root, lock_dir=tmp_path / "l"))) as client:
        await call(client, "edit_cell", path="odd.ipynb", cell=0, source="b")
        await call(client, "create_notebook", path="new.ipynb")
        await call(client, "edit_cell", path="alias.ipynb", cell=0, source="through the link")
        before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.iterdir()}
        reads: list[tuple[str, dict[str, Any]]] = [
            ("read_notebook", {"path": "odd.ipynb", "full": True}),
            ("read_cell", {"path": "alias.ipynb", "cell": 0}),
            ("search_notebook", {"path": "new.ipynb", "pattern": "x"}),
            ("list_notebooks", {}),
        ]
        for tool, args in reads:
            result = await client.call_tool(tool, args)
            assert not result.is_error, text_of(result)
        after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.iterdir()}
    assert before == after  # reading never writes: bytes and mtimes unchanged
    assert stat.S_IMODE(os.stat(root / "odd.ipynb").st_mode) == 0o701
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(root / "new.ipynb").st_mode) == 0o666 & ~umask
    assert os.path.islink(root / "alias.ipynb")
    assert parse((root / "real.ipynb").read_bytes()).cells[0]["source"] == "through the link"
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY
