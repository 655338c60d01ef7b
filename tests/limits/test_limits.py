"""Kernel limits and the sandbox, enforced for real on real kernels."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nbrelay import runtime
from nbrelay.config import Settings
from nbrelay.errors import Unsupported
from nbrelay.server import build_server
from tests.helpers import call, missing_tool, notebook, write_notebook
from tests.http.harness import report
from tests.security.swaps import exchanging

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels"),
]

NB = "work/nb.ipynb"


async def run(client: Client, code: str) -> dict[str, Any]:
    """Run scratch code in the notebook's kernel; return the one cell's result."""
    done = await call(client, "execute", path=NB, code=code, wait=120)
    assert done["status"] == "done", done
    cell: dict[str, Any] = done["cells"][0]
    return cell


def text(cell: dict[str, Any]) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


@pytest.fixture
def folders(root: Path, tmp_path: Path) -> dict[str, Path]:
    (root / "work").mkdir()
    (root / "other").mkdir()
    (root / "other" / "neighbour.txt").write_text("NEIGHBOUR")
    (tmp_path / "canary.txt").write_text("CANARY")
    return {"root": root, "work": root / "work", "outside": tmp_path}


async def open_client(settings: Settings) -> AsyncIterator[Client]:
    async with Client(build_server(settings), mode="auto") as c:
        await call(c, "create_notebook", path=NB)
        yield c


@pytest.fixture
async def limited(folders: dict[str, Path], tmp_path: Path) -> AsyncIterator[Client]:
    settings = Settings(
        root=folders["root"],
        lock_dir=tmp_path / "locks",
        kernel_memory=1024,
        kernel_cpu_time=3,
        kernel_pool=0,
    )
    async for c in open_client(settings):
        yield c


@pytest.fixture
async def sandboxed(folders: dict[str, Path], tmp_path: Path) -> AsyncIterator[Client]:
    settings = Settings(root=folders["root"], lock_dir=tmp_path / "locks", sandbox=True)
    async for c in open_client(settings):
        yield c


async def test_memory_over_the_limit_is_a_clear_error_and_the_kernel_lives_on(
    limited: Client,
) -> None:
    small = await run(limited, "block = bytearray(100 * 2**20)\nprint(len(block) // 2**20)")
    assert text(small) == "100\n"
    big = await run(limited, "huge = bytearray(3 * 2**30)")
    assert big["status"] == "error"
    assert "MemoryError: the kernel reached its memory limit of 1024 MB" in text(big)
    after = await run(limited, "print(len(block) // 2**20)")
    assert text(after) == "100\n"  # same kernel, state kept


async def test_cpu_time_over_the_limit_is_a_clear_error_and_nbrelay_stays_up(
    limited: Client,
) -> None:
    spin = await run(limited, "while True:\n    pass")
    assert spin["status"] == "error"
    assert "CPUTimeLimitExceeded: the kernel used up its CPU time limit of 3 s" in text(spin)
    assert "__nbrelay_limits" not in text(spin)
    listed = await call(limited, "list_notebooks")
    assert listed["count"] == 1
    fresh = await call(limited, "restart_kernel", path=NB)
    assert fresh
    assert text(await run(limited, "print(6 * 7)")) == "42\n"


async def test_a_sandboxed_kernel_sees_only_its_folder(
    sandboxed: Client, folders: dict[str, Path]
) -> None:
    work, outside = folders["work"], folders["outside"]
    probe = f"""
import os
def attempt(action):
    try:
        return repr(action())
    except Exception as exc:
        return type(exc).__name__
print("cwd", os.getcwd() == {str(work)!r})
print("canary", attempt(lambda: open({str(outside / "canary.txt")!r}).read()))
print("neighbour", attempt(lambda: open({str(folders["root"] / "other" / "neighbour.txt")!r}).read()))
print("home", attempt(lambda: os.listdir(os.path.expanduser("~root"))))
print("write-outside", attempt(lambda: open({str(outside / "escaped.txt")!r}, "w").write("x")))
print("write-system", attempt(lambda: open("/usr/escaped.txt", "w").write("x")))
print("write-etc", attempt(lambda: open("/etc/escaped.txt", "w").write("x")))
print("write-root", attempt(lambda: open("/escaped.txt", "w").write("x")))
print("write-own", attempt(lambda: open("made-here.txt", "w").write("ok")))
print("tmp", attempt(lambda: open("/tmp/private.txt", "w").write("t")))
print("shadow", attempt(lambda: open("/etc/shadow").read()))
print("system", os.path.exists("/usr/bin/env"))
"""
    lines = dict(line.split(" ", 1) for line in text(await run(sandboxed, probe)).splitlines())
    assert lines["cwd"] == "True"
    assert lines["canary"] == "FileNotFoundError"
    assert lines["neighbour"] == "FileNotFoundError"
    assert lines["write-root"] == "OSError"  # read-only file system
    assert lines["write-system"] == "OSError"  # read-only file system
    assert lines["write-etc"] == "OSError"
    assert lines["write-own"] == "2"
    assert lines["tmp"] == "1"
    assert lines["shadow"] == "FileNotFoundError"  # only the parts of /etc code needs are there
    assert lines["system"] == "True"
    assert "CANARY" not in str(lines)
    assert "NEIGHBOUR" not in str(lines)
    assert (work / "made-here.txt").read_text() == "ok"
    assert not (outside / "escaped.txt").exists()
    assert not Path("/usr/escaped.txt").exists()
    assert not Path("/etc/escaped.txt").exists()
    assert not Path("/escaped.txt").exists()
    assert not Path("/tmp/private.txt").exists()


@pytest.fixture
def private_etc_file() -> Iterator[Path]:
    """A token file only its owner may read, in a folder of /etc (as docs/security.md's
    /etc/nbrelay/tokens), removed afterwards."""
    folder = Path("/etc") / f"nbrelay-test-{secrets.token_hex(4)}"
    try:
        folder.mkdir(mode=0o700)
    except PermissionError:
        missing_tool("this test writes a private file in /etc, which needs root (CI runs as root)")
    tokens = folder / "tokens"
    tokens.write_text("CANARY-etc-token\n")
    tokens.chmod(0o600)
    try:
        yield tokens
    finally:
        shutil.rmtree(folder)


async def test_a_sandboxed_kernel_sees_only_the_parts_of_etc_ordinary_code_needs(
    sandboxed: Client, private_etc_file: Path, request: pytest.FixtureRequest
) -> None:
    probe = f"""
import getpass, io, json, os, socket, ssl, subprocess, time
def attempt(action):
    try:
        return repr(action())
    except Exception as exc:
        return type(exc).__name__
found = {{}}
found["token"] = attempt(lambda: open({str(private_etc_file)!r}).read())
found["token folder listed"] = {private_etc_file.parent.name!r} in os.listdir("/etc")
found["shadow"] = attempt(lambda: open("/etc/shadow").read())
found["ca certificates"] = ssl.create_default_context().cert_store_stats()["x509_ca"]
found["localhost"] = socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)[0][4][0]
for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
    os.environ.pop(name, None)
found["user"] = getpass.getuser()
found["time zone"] = time.strftime("%Z")
found["fonts"] = len(subprocess.run(["fc-list"], capture_output=True, text=True).stdout.splitlines())
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig = plt.figure()
fig.text(0.5, 0.5, "hello")
buffer = io.BytesIO()
fig.savefig(buffer, format="png")
found["png bytes"] = len(buffer.getvalue())
print(json.dumps(found))
"""
    found = json.loads(text(await run(sandboxed, probe)))
    assert found["token"] == "FileNotFoundError"
    assert found["token folder listed"] is False
    assert found["shadow"] == "FileNotFoundError"
    assert found["ca certificates"] > 0
    assert found["localhost"] in ("127.0.0.1", "::1")
    assert found["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert found["time zone"] == time.strftime("%Z")
    if shutil.which("fc-list"):
        assert found["fonts"] > 0
    assert found["png bytes"] > 1000
    report(
        request,
        "sandbox /etc: a private token file in /etc unreadable (and its folder unlisted); "
        f"{found['ca certificates']} CA certificates, localhost, user, time zone, "
        f"{found['fonts']} fonts and a matplotlib PNG all work",
    )


async def test_a_sandboxed_kernel_has_no_network(sandboxed: Client) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    print("connected")
except OSError as exc:
    print("refused", type(exc).__name__)
"""
        result = text(await run(sandboxed, probe))
    assert result.startswith("refused"), result


async def test_network_can_be_cut_off_without_the_file_sandbox(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    settings = Settings(root=folders["root"], lock_dir=tmp_path / "locks", kernel_network=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        async for c in open_client(settings):
            code = f"""
import socket
print(open({str(folders["outside"] / "canary.txt")!r}).read())
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    print("connected")
except OSError as exc:
    print("refused")
"""
            assert text(await run(c, code)) == "CANARY\nrefused\n"


async def test_unix_sockets_stay_reachable_without_the_file_sandbox(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """--no-kernel-network alone leaves a kernel every Unix socket of the machine (a local
    proxy would give it the network back), as --help and docs/options.md say; --sandbox closes it."""
    from nbrelay.config import OPTION_BY_NAME

    assert "Unix socket" in OPTION_BY_NAME["kernel_network"].help
    assert "--sandbox" in OPTION_BY_NAME["kernel_network"].help
    path = str(tmp_path / "proxy.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        code = f"""
import socket
try:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect({path!r})
    print("connected")
except OSError as exc:
    print("refused")
"""
        seen = {}
        for sandbox in (False, True):
            settings = Settings(
                root=folders["root"],
                lock_dir=tmp_path / "locks",
                kernel_network=False,
                sandbox=sandbox,
            )
            async for c in open_client(settings):
                seen[sandbox] = text(await run(c, code))
            (folders["root"] / NB).unlink()
    assert seen == {False: "connected\n", True: "refused\n"}


async def test_the_sandbox_leaves_no_temporary_files(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    settings = Settings(root=folders["root"], lock_dir=tmp_path / "locks", sandbox=True)
    private = runtime.default_dir()  # nbrelay's runtime folder, where socket folders are made
    code = (
        "import os\nopen('/tmp/scratch', 'w').write('x')\n"
        f"print(*sorted(os.listdir({str(private)!r})))"
    )
    async for c in open_client(settings):
        seen = text(await run(c, code)).split()
        # its own connection file and socket folder are all it sees of nbrelay's folder
        assert len(seen) == 2, seen
        assert seen[0].startswith("ipc-"), seen
        assert seen[1].startswith("kernel-"), seen
        assert (private / seen[0]).is_dir()
    # the server stopped, and its kernel with it: the socket folder is gone, /tmp untouched
    assert not (private / seen[0]).exists()
    assert not (private / seen[1]).exists()
    assert not Path("/tmp/scratch").exists()


def test_settings_the_machine_cannot_enforce_are_refused(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for settings in (
        Settings(root=folders["root"], sandbox=True),
        Settings(root=folders["root"], kernel_network=False),
    ):
        with pytest.raises(Unsupported) as info:
            build_server(settings)
        assert "needs bubblewrap, and no bwrap is on PATH" in info.value.message
        assert "apt-get install bubblewrap" in info.value.hint
    monkeypatch.undo()
    with pytest.raises(Unsupported, match="in live mode the Jupyter Server starts them"):
        build_server(
            Settings(root=folders["root"], kernel_memory=512, jupyter_url="http://127.0.0.1:9/")
        )
    assert shutil.which("bwrap")


async def test_a_sandboxed_kernel_saves_its_state_in_a_folder_reached_through_a_symlink(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """State files are opened by real path, from "/", one folder at a time: the sandbox shows
    the kernel its folder's real path too."""
    (folders["root"] / "real").mkdir()
    os.symlink("real", folders["root"] / "link")
    settings = Settings(root=folders["root"], lock_dir=tmp_path / "locks", sandbox=True)
    async with Client(build_server(settings), mode="auto") as c:
        await call(c, "create_notebook", path="link/nb.ipynb")
        await call(c, "execute", path="link/nb.ipynb", code="kept = 41 + 1", wait=120)
        saved = await call(c, "save_kernel_state", path="link/nb.ipynb")
        assert saved["names"] == ["kept"], saved
        await call(c, "restart_kernel", path="link/nb.ipynb")
        await call(c, "restore_kernel_state", path="link/nb.ipynb")
        done = await call(c, "execute", path="link/nb.ipynb", code="print(kept)", wait=120)
        assert text(done["cells"][0]) == "42\n"
    assert (folders["root"] / "real" / ".nbrelay-state" / "nb.ipynb.dill").is_file()


async def test_a_folder_swapped_for_a_symlink_as_a_sandboxed_kernel_starts_is_never_bound(
    folders: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The sandbox binds the kernel's folder from a descriptor the store opened (by
    descriptors from the root), not by path: a folder exchanged with a symlink to another
    folder while kernels start (RENAME_EXCHANGE in a loop) is never what a kernel sees."""
    root, elsewhere = folders["root"], folders["outside"] / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "canary.txt").write_text("CANARY")
    (root / "swapdir").mkdir()
    write_notebook(root / "swapdir" / "n.ipynb", notebook())
    os.symlink(elsewhere, root / "swaplink")
    settings = Settings(root=root, lock_dir=tmp_path / "locks", sandbox=True)
    seen = {"own folder": 0, "the other folder": 0, "refused": 0}
    starts, most = 16, 20_000  # kernels that got past the path checks; calls at most
    # About every 0.2 s (refused calls take a millisecond, so most land in a state that
    # refuses them): a call whose checks pass starts its kernel a moment later, in either state.
    with exchanging([(root / "swapdir", root / "swaplink")], pause=0.2):
        async with Client(build_server(settings), mode="auto") as c:
            while seen["own folder"] + seen["the other folder"] < starts:
                assert sum(seen.values()) < most, seen
                code = "import os\nprint(sorted(os.listdir('.')))"
                args = {"path": "swapdir/n.ipynb", "code": code, "wait": 120}
                result = await c.call_tool("execute", args)
                said = str(result.structured_content)
                if result.is_error:
                    seen["refused"] += 1
                    continue
                seen["the other folder" if "canary.txt" in said else "own folder"] += 1
                await c.call_tool("restart_kernel", {"path": "swapdir/n.ipynb", "shutdown": True})
    assert seen["the other folder"] == 0, seen
    report(
        request,
        f"sandbox bind race: {starts} kernel starts while the notebook's folder was exchanged "
        f"with a symlink ({seen['refused']} calls refused by the path checks): all saw their own "
        "folder, 0 were given the other folder",
    )
