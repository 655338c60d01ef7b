"""The quick loop's promises (CONTRIBUTING.md, ``tests/markers.py``): a test with a kernel script
runs on the scripted kernel under ``--quick`` and on a real kernel in the full run (the same
test, nothing patched); a test that starts a kernel it has neither a marker nor a script for
fails ``--quick`` naming the marker; and every script names a test that exists."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markers import TESTS_DIR, _book

REPO = TESTS_DIR.parent

CONFTEST = """
import pytest

pytest_plugins = ["tests.markers"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
"""

KERNEL_SCRIPTS = """
from tests.scripted import Script, out

SCRIPTS = {
    "test_probe.py::test_scripted": Script(
        {"import sys; print(sys.implementation.name)": [out("scripted\\n")]}
    ),
}
"""

PROBE = """
import os
from pathlib import Path

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import call, counter_ids

pytestmark = pytest.mark.anyio


async def run(tmp_path: Path, code: str) -> str:
    root = tmp_path / "root"
    root.mkdir()
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    ws = Workspace(settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids())
    async with Client(build_server(settings, ws)) as client:
        await call(client, "create_notebook", path="nb.ipynb")
        done = await call(client, "execute", path="nb.ipynb", code=code)
    return str(done["cells"][0]["outputs"][0]["text"])


async def test_scripted(tmp_path: Path) -> None:
    ran = await run(tmp_path, "import sys; print(sys.implementation.name)")
    Path(os.environ["PROBE_OUT"]).write_text(ran)


async def test_unmarked(tmp_path: Path) -> None:
    assert await run(tmp_path, "print(6 * 7)") == "42\\n"
"""


def _pytest(tmp_path: Path, *args: str) -> tuple[str, str]:
    """Run the probe tests under the suite's markers plugin; pytest's output and what the
    scripted test's code printed."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "conftest.py").write_text(CONFTEST)
    (probe / "kernel_scripts.py").write_text(KERNEL_SCRIPTS)
    (probe / "test_probe.py").write_text(PROBE)
    ran = tmp_path / "ran.txt"
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "NBRELAY_FULL_SUITE")}
    environ.update(PYTHONPATH=str(REPO), PROBE_OUT=str(ran))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *args],
        cwd=probe,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.stdout, ran.read_text() if ran.exists() else ""


@pytest.mark.kernel
def test_the_full_run_runs_a_scripted_test_on_a_real_kernel(tmp_path: Path) -> None:
    out, ran = _pytest(tmp_path, "-m", "scripted")
    assert "1 passed, 1 deselected" in out, out[-3000:]
    assert ran == "cpython\n"  # a real kernel ran the code: the script was not used


def test_quick_runs_a_scripted_test_on_the_scripted_kernel(tmp_path: Path) -> None:
    out, ran = _pytest(tmp_path, "--quick", "test_probe.py::test_scripted")
    assert "1 passed" in out, out[-3000:]
    assert ran == "scripted\n"


def test_quick_fails_a_test_that_starts_a_kernel_it_has_no_marker_for(tmp_path: Path) -> None:
    out, _ = _pytest(tmp_path, "--quick", "test_probe.py::test_unmarked")
    assert "1 failed" in out, out[-3000:]
    assert "--quick: this test started a kernel" in out
    assert "mark it `kernel`" in out


def test_every_kernel_script_names_a_test_of_its_folder() -> None:
    """A script under a misspelt name would leave its test out of the quick loop unnoticed."""
    books = sorted(TESTS_DIR.rglob("kernel_scripts.py"))
    assert books, "no kernel_scripts.py under tests/"
    for path in books:
        for key in _book(path):
            file, name = key.split("::")
            tree = ast.parse((path.parent / file).read_text())
            tests = {n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)}
            tests |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert name in tests, f"{path}: {key} names no test of {file}"
