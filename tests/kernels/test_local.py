"""Local kernels and the shared execution loop, on real ipykernel processes."""

from __future__ import annotations

import importlib.metadata
import os
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import psutil
import pytest

from nbrelay import runtime
from nbrelay.caller import Caller
from nbrelay.errors import KernelError, PathError
from nbrelay.kernels.base import LaunchPolicy
from nbrelay.kernels.execution import Outcome, Policy, Runner
from nbrelay.kernels.local import LocalKernels, LocalSession
from nbrelay.notebook.outputs import CellOutputs, Output
from nbrelay.notebook.render import output_text
from tests.helpers import PATIENCE
from tests.kernels.conftest import eventually

pytestmark = pytest.mark.anyio

ME = Caller("test")  # who asks: local kernels ask no one


@pytest.fixture
async def kernels() -> AsyncIterator[LocalKernels]:
    provider = LocalKernels(pool_size=0)
    try:
        yield provider
    finally:
        await provider.aclose()


async def run(runner: Runner, code: str, limit: float = 30) -> tuple[Outcome, list[Output]]:
    cell = CellOutputs()
    with anyio.fail_after(limit + PATIENCE):
        outcome = await runner.execute(code, cell.feed, caller=ME, time_limit=limit)
    return outcome, cell.outputs()


def texts(outputs: list[Output]) -> str:
    return "".join(output_text(o).text for o in outputs)


async def test_every_kind_of_output_is_folded_into_nbformat_outputs(
    kernels: LocalKernels, tmp_path: Path
) -> None:
    session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    runner = Runner(session)
    code = (
        "import sys, base64\n"
        "from IPython.display import display, HTML, Image, clear_output, update_display\n"
        "print('out 1'); print('out 2')\n"
        "sys.stderr.write('err\\n')\n"
        "display(HTML('<b>bold</b>'))\n"
        "h = display({'text/plain': 'v1'}, raw=True, display_id='d')\n"
        "update_display({'text/plain': 'v2'}, raw=True, display_id='d')\n"
        "png = base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==')\n"
        "display(Image(png))\n"
        "'result'"
    )
    outcome, outputs = await run(runner, code)
    assert outcome.status == "ok"
    assert outcome.execution_count == 1
    kinds = [(o["output_type"], o.get("name")) for o in outputs]
    assert kinds == [
        ("stream", "stdout"),
        ("stream", "stderr"),
        ("display_data", None),
        ("display_data", None),
        ("display_data", None),
        ("execute_result", None),
    ]
    assert outputs[0]["text"] == "out 1\nout 2\n"
    assert outputs[2]["data"]["text/html"] == "<b>bold</b>"
    assert outputs[3]["data"] == {"text/plain": "v2"}
    assert "image/png" in outputs[4]["data"]
    assert outputs[5]["data"]["text/plain"] == "'result'"
    assert outputs[5]["execution_count"] == 1

    outcome, outputs = await run(
        runner,
        "from IPython.display import clear_output\n"
        "print('old')\nclear_output(wait=True)\nprint('new')\n1/0",
    )
    assert outcome.status == "error"
    assert [o["output_type"] for o in outputs] == ["stream", "error"]
    assert outputs[0]["text"] == "new\n"
    assert outputs[1]["ename"] == "ZeroDivisionError"


async def test_kernel_runs_in_the_notebook_folder_without_secrets(
    kernels: LocalKernels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBRELAY_TOKEN", "nbrelay-secret")
    monkeypatch.setenv("JUPYTER_TOKEN", "jupyter-secret")
    monkeypatch.setenv("MY_SERVICE_API_KEY", "api-secret")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    folder = tmp_path / "sub"
    folder.mkdir()
    session = await kernels.session("sub/a.ipynb", ME, kernel_name="python3", cwd=str(folder))
    outcome, outputs = await run(
        Runner(session),
        "import os\nprint(os.getcwd())\n"
        "print(sorted(k for k in os.environ if os.environ[k].endswith('-secret') or k == 'PLAIN_SETTING'))",
    )
    assert outcome.status == "ok"
    assert texts(outputs) == f"{folder}\n['PLAIN_SETTING']\n"


async def test_timeout_interrupts_and_keeps_variables(
    kernels: LocalKernels, tmp_path: Path
) -> None:
    session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    runner = Runner(session, Policy(interrupt_grace=5))
    await run(runner, "x = 41")
    outcome, outputs = await run(runner, "while True: pass", limit=2)
    assert outcome.status == "timeout"
    assert outcome.message == "timed out after 2 s; kernel interrupted; variables kept"
    assert not outcome.state_lost
    assert outputs[-1]["ename"] == "KeyboardInterrupt"
    outcome, outputs = await run(runner, "x + 1")
    assert (outcome.status, texts(outputs)) == ("ok", "42")


async def test_interrupt_stops_a_running_cell(kernels: LocalKernels, tmp_path: Path) -> None:
    session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    runner = Runner(session)
    results: list[Outcome] = []
    cell = CellOutputs()

    async def long_cell() -> None:
        code = "import time\nprint('started', flush=True)\ntime.sleep(600)"
        with anyio.fail_after(PATIENCE):
            results.append(await runner.execute(code, cell.feed, caller=ME, time_limit=PATIENCE))

    async with anyio.create_task_group() as tg:
        tg.start_soon(long_cell)
        # interrupt once the cell is inside its sleep (it has printed)
        await eventually(lambda: texts(cell.outputs()) == "started\n", 20)
        await runner.interrupt(ME)
    assert results[0].status == "interrupted"
    assert results[0].reply is not None
    assert results[0].reply["ename"] == "KeyboardInterrupt"


@pytest.mark.parametrize(
    ("code", "how"),
    [
        ("os.kill(os.getpid(), 9)", "was killed by signal 9 (SIGKILL)"),
        ("os._exit(3)", "exited with code 3"),
    ],
)
async def test_a_kernel_that_dies_mid_run_is_detected_and_restarted(
    kernels: LocalKernels, tmp_path: Path, code: str, how: str
) -> None:
    session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    runner = Runner(session)
    await run(runner, "x = 1")
    old_pid = session.pid
    outcome, outputs = await run(
        runner, f"import os, time\nprint('before', flush=True)\ntime.sleep(0.5)\n{code}"
    )
    assert outcome.status == "died"
    assert outcome.state_lost
    assert outcome.message == (
        f"the kernel {how} while running this code; the outputs it produced before are kept; "
        "kernel restarted; all variables were lost: re-run the cells that define them"
    )
    assert texts(outputs) == "before\n"
    assert session.pid != old_pid
    outcome, outputs = await run(runner, "'x' in dir()")
    assert (outcome.status, texts(outputs)) == ("ok", "False")


async def test_a_kernel_without_importlib_metadata_lists_its_packages_all_the_same(
    kernels: LocalKernels, tmp_path: Path
) -> None:
    """A Python 3.7 kernel (an older project's environment) has no ``importlib.metadata``:
    install_packages failed there before installing anything. Its listing now falls back to
    setuptools' ``pkg_resources``; the kernel here is made to lack the module the same way
    (the machines this runs on have no Python 3.7)."""
    from nbrelay.kernels import introspect

    session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    runner = Runner(session, Policy())
    outcome, _ = await run(runner, "import sys\nsys.modules['importlib.metadata'] = None")
    assert outcome.status == "ok"
    outcome, outputs = await runner.evaluate(introspect.distributions(), ME)
    listed = dict(introspect.parse(outputs, "listing the kernel's packages")["dists"])
    assert listed["ipykernel"] == importlib.metadata.version("ipykernel")
    _, outputs = await run(runner, "import importlib.metadata")
    assert "ModuleNotFoundError" in texts(outputs)  # the fallback was the one that answered


async def test_a_kernel_that_ignores_interrupts_is_restarted_after_the_grace_period(
    kernels: LocalKernels, tmp_path: Path
) -> None:
    session = await kernels.session("a.ipynb", ME, kernel_name="fault-deaf", cwd=str(tmp_path))
    runner = Runner(session, Policy(interrupt_grace=2))
    outcome, _ = await run(runner, "while True: pass", limit=1)
    assert outcome.status == "timeout"
    assert outcome.state_lost
    assert outcome.message == (
        "timed out after 1 s; kernel interrupted; it did not stop within 2 s of the interrupt; "
        "kernel restarted; all variables were lost: re-run the cells that define them"
    )
    outcome, outputs = await run(runner, "6 * 7")
    assert texts(outputs) == "42"


async def test_a_kernel_that_fails_to_start_names_the_spec_and_its_stderr(
    kernels: LocalKernels, tmp_path: Path
) -> None:
    with anyio.fail_after(60), pytest.raises(KernelError) as info:
        await kernels.session("a.ipynb", ME, kernel_name="fault-dies-at-start", cwd=str(tmp_path))
    assert info.value.message == (
        "the 'fault-dies-at-start' kernel died during start-up. Its last stderr lines:\n"
        "fault kernel: failing at start, as asked"
    )
    with anyio.fail_after(60), pytest.raises(KernelError) as info:
        await kernels.session("a.ipynb", ME, kernel_name="fault-missing", cwd=str(tmp_path))
    assert info.value.message.startswith("the 'fault-missing' kernel ")
    assert "no-such-kernel-command" in info.value.message
    with pytest.raises(KernelError) as info:
        await kernels.session("a.ipynb", ME, kernel_name="no-such-spec", cwd=str(tmp_path))
    assert info.value.message == "no kernelspec named 'no-such-spec' is installed."
    assert "python3" in info.value.hint
    assert "notebook_metadata(path=…, kernel=…)" in info.value.hint  # the call that fixes it
    assert kernels.running() == []


async def test_a_kernel_whose_port_another_process_took_starts_again_on_new_ports(
    kernels: LocalKernels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jupyter_client picks free ports, then the kernel binds them; on a busy machine another
    process can bind one in between (a CI run lost two starts to it). The race is forced: a
    socket of this test holds a port, and the port picker hands out that port first."""
    from jupyter_client.connect import LocalPortCache

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks = {"taken": 0}
    find = LocalPortCache.find_available_port

    def first_the_taken_port(self: LocalPortCache, ip: str) -> int:
        if picks["taken"] < 2:  # the first two starts both meet it
            picks["taken"] += 1
            return int(taken.getsockname()[1])
        return find(self, ip)

    monkeypatch.setattr(LocalPortCache, "find_available_port", first_the_taken_port)
    try:
        with anyio.fail_after(3 * PATIENCE):
            session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
        outcome, outputs = await run(Runner(session), "6 * 7")
    finally:
        taken.close()
    assert picks["taken"] == 2
    assert (outcome.status, texts(outputs)) == ("ok", "42")
    assert [k.key for k in kernels.running()] == ["a.ipynb"]


async def test_a_kernel_that_keeps_meeting_taken_ports_says_so(
    kernels: LocalKernels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_client.connect import LocalPortCache

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    monkeypatch.setattr(
        LocalPortCache, "find_available_port", lambda self, ip: int(taken.getsockname()[1])
    )
    try:
        with anyio.fail_after(3 * PATIENCE), pytest.raises(KernelError) as info:
            await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    finally:
        taken.close()
    assert "Address already in use" in info.value.message
    assert kernels.running() == []


def hold_the_ports_at_restart(
    session: LocalSession, times: int, ports: list[int]
) -> list[socket.socket]:
    """Make a restart meet a taken port: right before the kernel process is launched again
    (the old one has exited), a socket of this test binds the shell port it is about to use,
    on the first ``times`` launches. The sockets are returned for the test to close; ``ports``
    gets the ports they hold."""
    provisioner = session.km.provisioner
    assert provisioner is not None
    pre_launch = provisioner.pre_launch
    held: list[socket.socket] = []

    async def taking_a_port_first(**kw: object) -> dict[str, object]:
        out = await pre_launch(**kw)
        if len(held) < times:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
            sock.bind(("127.0.0.1", int(session.km.shell_port)))
            sock.listen()
            held.append(sock)
            ports.append(int(session.km.shell_port))
        return out

    provisioner.pre_launch = taking_a_port_first  # type: ignore[method-assign]
    return held


async def test_a_restart_whose_port_another_process_took_restarts_on_new_ports(
    kernels: LocalKernels, tmp_path: Path
) -> None:
    """A restart binds the kernel's ports again: another process can take one in the moment
    between the old process's exit and the new one's bind."""
    session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    runner = Runner(session)
    await run(runner, "x = 1")
    old_port = session.km.shell_port
    ports: list[int] = []
    held = hold_the_ports_at_restart(session, times=1, ports=ports)
    try:
        with anyio.fail_after(3 * PATIENCE):
            await session.restart(ME)
        outcome, outputs = await run(runner, "'x' in dir(), 6 * 7")
    finally:
        for sock in held:
            sock.close()
    assert ports == [old_port]
    assert session.km.shell_port != old_port
    assert (outcome.status, texts(outputs)) == ("ok", "(False, 42)")
    assert session.info.state == "idle"
    assert session.restarts == 1


async def test_a_restart_that_keeps_meeting_taken_ports_says_so(
    kernels: LocalKernels, tmp_path: Path
) -> None:
    session = await kernels.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
    ports: list[int] = []
    held = hold_the_ports_at_restart(session, times=99, ports=ports)
    try:
        with anyio.fail_after(3 * PATIENCE), pytest.raises(KernelError) as info:
            await session.restart(ME)
    finally:
        for sock in held:
            sock.close()
    assert len(ports) == 3  # PORT_TRIES launches, each on ports of its own
    assert len(set(ports)) == 3
    assert "Address already in use" in info.value.message
    assert session.info.state == "dead"


async def test_kernel_output_on_its_own_fds_never_reaches_ours(
    kernels: LocalKernels, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    session = await kernels.session("a.ipynb", ME, kernel_name="fault-chatty", cwd=str(tmp_path))
    outcome, _ = await run(
        Runner(session),
        "import os, subprocess\nos.write(1, b'fd1\\n')\nos.system('echo shell')\n"
        "subprocess.run(['echo', 'sub'])",
    )
    assert outcome.status == "ok"  # the cell, and the processes it ran, have finished writing
    assert capfd.readouterr().out == ""


async def test_start_and_shutdown_leave_no_process_file_or_descriptor(
    tmp_path: Path, jupyter_dirs: Path
) -> None:
    me = psutil.Process()
    # Processes other tests started for the whole session (a Jupyter Server) are not leaks.
    before = {c.pid for c in me.children(recursive=True)}

    async def cycle() -> int:
        provider = LocalKernels(pool_size=0)
        try:
            session = await provider.session(
                "a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path)
            )
            outcome, _ = await run(Runner(session), "1 + 1")
            assert outcome.status == "ok"
            pid = session.pid
            assert pid is not None
        finally:
            await provider.aclose()
        return pid

    await cycle()  # the first cycle opens what is kept for good (zmq context, imports)
    fds = me.num_fds()
    pids = [await cycle() for _ in range(4)]
    await eventually(lambda: not any(_running(p) for p in pids), 10)
    assert abs(me.num_fds() - fds) <= 5
    assert jupyter_dirs.is_dir()  # where the connection files were
    assert list(jupyter_dirs.glob("kernel-*.json")) == []
    live = [c for c in me.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
    assert [c for c in live if c.pid not in before] == []


async def test_warm_kernel_moves_to_the_notebook_folder(tmp_path: Path) -> None:
    provider = LocalKernels(pool_size=1, pool_cwd=str(tmp_path))
    folder = tmp_path / "nb"
    folder.mkdir()
    try:
        async with anyio.create_task_group() as tg:
            provider.attach(tg)
            first = await provider.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
            await eventually(lambda: bool(provider._pool), 60)
            warm_pid = provider._pool[0].pid
            second = await provider.session(
                "nb/b.ipynb", ME, kernel_name="python3", cwd=str(folder)
            )
            assert second.pid == warm_pid != first.pid
            _, outputs = await run(
                Runner(second), "import os\nprint(os.getcwd(), os.environ['JPY_SESSION_NAME'])"
            )
            assert texts(outputs) == f"{folder} nb/b.ipynb\n"
            assert second.info.cwd == str(folder)
            tg.cancel_scope.cancel()
    finally:
        await provider.aclose()


async def test_a_pool_refill_cancelled_mid_start_leaves_no_kernel(tmp_path: Path) -> None:
    """nbrelay stopping while a warm kernel starts: whatever moment it lands, no kernel stays."""
    import gc

    me = psutil.Process()
    before = {c.pid for c in me.children(recursive=True)}
    for delay in (0.0, 0.05, 0.15, 0.3, 0.6, 1.0):
        provider = LocalKernels(pool_size=1, pool_cwd=str(tmp_path))
        try:
            async with anyio.create_task_group() as tg:
                provider.attach(tg)
                provider._refill()
                assert provider._filling
                await anyio.sleep(delay)
                tg.cancel_scope.cancel()
        finally:
            await provider.aclose()
        gc.collect()
        await eventually(
            lambda: all(
                c.pid in before or not _running(c.pid) for c in me.children(recursive=True)
            ),
            10,
        )


async def test_launch_policy_prefix_and_ipc_transport_apply_to_every_kernel(
    tmp_path: Path,
) -> None:
    policy = LaunchPolicy(
        argv_prefix=("env", "NBRELAY_POLICY_MARK=1"), transport="ipc", env={"EXTRA": "yes"}
    )
    provider = LocalKernels(policy=policy, pool_size=0)
    try:
        session = await provider.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
        assert isinstance(session, LocalSession)
        assert session.km.transport == "ipc"
        _, outputs = await run(
            Runner(session),
            "import os\nprint(os.environ.get('EXTRA'), 'NBRELAY_POLICY_MARK' in os.environ)",
        )
        assert texts(outputs) == "yes True\n"
    finally:
        await provider.aclose()


def test_no_kernel_outlives_a_killed_server(tmp_path: Path) -> None:
    """The server is SIGKILLed (no clean-up runs): its kernel still goes within seconds."""
    import subprocess

    script = (
        "import anyio, sys\n"
        "from nbrelay.caller import Caller\n"
        "from nbrelay.kernels.local import LocalKernels\n"
        "async def main():\n"
        "    p = LocalKernels(pool_size=0)\n"
        f"    s = await p.session('a.ipynb', Caller('test'), kernel_name='python3', cwd={str(tmp_path)!r})\n"
        "    sys.stderr.write(f'PID {s.pid}\\n'); sys.stderr.flush()\n"
        "    await anyio.sleep(120)\n"
        "anyio.run(main)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + PATIENCE
        while not line.startswith("PID") and time.monotonic() < deadline:
            line = proc.stderr.readline()
        kernel_pid = int(line.split()[1])
        assert psutil.pid_exists(kernel_pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline and _running(kernel_pid):
            time.sleep(0.1)
        assert not _running(kernel_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_ipc_sockets_fit_under_a_runtime_folder_too_deep_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime folder whose path leaves no room for a Unix socket's name (a deep
    ``$XDG_RUNTIME_DIR``; ZeroMQ refused it with "File name too long"): the kernel's sockets go
    to a private folder of the temp folder, the kernel runs, and that folder goes with it."""
    deep = tmp_path / ("d" * 90)
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    provider = LocalKernels(policy=LaunchPolicy(transport="ipc"), pool_size=0)
    try:
        session = await provider.session("a.ipynb", ME, kernel_name="python3", cwd=str(tmp_path))
        assert isinstance(session, LocalSession)
        sockets = Path(session.km.ip).parent
        assert not sockets.is_relative_to(deep)
        assert stat.S_IMODE(sockets.stat().st_mode) == 0o700
        _, outputs = await run(Runner(session), "print(6 * 7)")
        assert texts(outputs) == "42\n"
    finally:
        await provider.aclose()
    assert not sockets.exists()


def test_no_room_for_a_socket_anywhere_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 90)
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(PathError) as refused:
        runtime.make_socket_folder("ipc-", len("kernel-65535"))
    assert "too long for a Unix socket" in refused.value.message
    assert "shorter path" in refused.value.hint
    assert [p.name for p in deep.iterdir()] == ["nbrelay"]  # nothing made is left behind
    assert list((deep / "nbrelay").iterdir()) == []
