"""What a test starts, as markers, and the quick loop (``--quick``), loaded by the root conftest.

Markers (registered in pyproject.toml) say what a test starts besides nbrelay in process:

* ``kernel``: runs code on a kernel (real kernels in the full run);
* ``scripted``: a ``kernel`` test whose kernel replies are scripted (``kernel_scripts.py`` of its
  folder, see ``tests.scripted``): ``--quick`` runs it on the scripted kernel;
* ``jupyter``: a Jupyter Server (live mode, the server extension, Kernel Gateway);
* ``hub``: a JupyterHub (and its users' Jupyter Servers);
* ``browser``: headless Chromium (PDF export, Playwright);
* ``process``: nbrelay as a process of its own (served over HTTP or stdio, or its command line).

They are applied here, from the test's folder (``FOLDERS``), file (``FILES``) or name
(``TESTS``), the fixtures it uses (``FIXTURES``) and its parameters (live ``store_mode``); a test
may also carry one itself (``@pytest.mark.kernel``). So ``-m "not jupyter and not browser"``
works.

``--quick`` is the loop to run while working: it leaves out every test that starts one of these
(a ``scripted`` test stays, on the scripted kernel), skips the folders and files that hold
nothing else and the folders of ``QUICK_LEAVES_OUT``, and gives each test ``QUICK_TIMEOUT``
seconds. A wrong marker fails loudly rather than slowing the loop: under ``--quick`` starting
any of them (a kernel, a Jupyter Server, a JupyterHub, Chromium, an nbrelay process) is refused
at ``subprocess.Popen`` and fails the test, naming the marker it needs.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.util
import os
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.scripted import Script, ScriptedKernels

HEAVY = ("kernel", "jupyter", "hub", "browser", "process")
QUICK_TIMEOUT = 60  # seconds a test may take under --quick (the full run: 300)
TESTS_DIR = Path(__file__).resolve().parent

# Folders (under tests/) whose every test starts these.
FOLDERS: dict[str, tuple[str, ...]] = {
    "kernels": ("kernel",),
    "live": ("jupyter",),
    "extension": ("jupyter",),
    "hub": ("hub", "jupyter"),
    "http": ("process",),
    "reliability": ("process",),
}

# Folders --quick leaves out for their time alone (their tests carry the markers of what they
# start like any other): the attacks on every tool of every profile take many minutes.
QUICK_LEAVES_OUT = ("security",)

# Files (under tests/) whose every test starts these.
FILES: dict[str, tuple[str, ...]] = {
    "corpus/test_world.py": ("kernel", "browser"),  # runs and exports (PDF) every notebook
    "live/test_browser.py": ("browser",),  # JupyterLab in Playwright's Chromium
    "extension/test_browser.py": ("browser",),
    "limits/test_sessions.py": ("kernel",),
    "profiles/test_error_words.py": ("kernel", "browser"),  # every tool of every profile
    "services/test_visualize.py": ("kernel",),
    "tools/test_tasks.py": ("kernel", "browser", "jupyter", "process"),  # every task kind, mode
    "tools/test_task_notifications.py": ("kernel", "process"),  # runs as tasks, over stdio/HTTP
}

# Tests (``folder/file.py::name``, shell patterns) that start these; the rest are found from
# their folder, file and fixtures.
TESTS: dict[str, tuple[str, ...]] = {
    "apps/test_notebook_view.py::test_the_view_*_in_chromium": ("kernel", "browser"),
    "apps/test_notebook_view.py::test_the_view_renders_markdown_*": ("kernel", "browser"),
    "apps/test_notebook_view.py::test_no_script_in_markdown_*": ("kernel", "browser"),
    "apps/test_notebook_view.py::test_the_frame_is_sized_*": ("kernel", "browser"),
    "apps/test_notebook_view.py::test_a_finished_cell_keeps_its_count_*": ("kernel", "browser"),
    "profiles/differential/test_differential.py::test_file_profile_answers_*": ("kernel",),
    "profiles/jupyter_mcp_server/test_differential.py::*": ("jupyter", "kernel", "process"),
    "profiles/test_srcbook.py::test_the_seeds_configuration_*": ("kernel", "process"),
    "limits/test_limits.py::test_*kernel*": ("kernel",),
    "limits/test_limits.py::test_cpu_time_over_the_limit_*": ("kernel",),
    "limits/test_limits.py::test_network_can_be_cut_off_without_the_file_sandbox": ("kernel",),
    "limits/test_limits.py::test_the_sandbox_leaves_no_temporary_files": ("kernel",),
    "limits/test_limits.py::test_unix_sockets_stay_reachable_*": ("kernel",),
    "profiles/test_ipynb_mcp.py::test_agent_workflow_on_real_kernel_outputs": ("kernel",),
    "profiles/test_*.py::test_nbrelay_serve_over_stdio": ("process",),
    "profiles/test_srcbook.py::test_storage_directory_is_the_sessions_folder": ("process",),
    "resources/test_feed.py::test_a_client_listening_over_stdio_hears_a_persons_edit": ("process",),
    "resources/test_feed.py::test_an_edit_by_another_nbrelay_process_is_reported": ("process",),
    "resources/test_history.py::test_history_records_each_cell_run": ("kernel",),
    "resources/test_resources.py::test_a_pdf_resource": ("browser",),
    "services/test_export.py::test_pdf_is_rendered_with_pages_and_the_cell_text": ("browser",),
    "services/test_export.py::test_saving_a_pdf_and_an_ipynb_copy": ("browser",),
    "test_cli.py::test_demo_runs_the_real_server_and_leaves_a_valid_notebook": (
        "process",
        "kernel",
    ),
    "test_stdio.py::test_a_request_that_cannot_be_decoded_gets_a_json_rpc_error": ("process",),
    "test_cli.py::test_the_installed_command_hides_a_mistyped_token": ("process",),
    "test_options.py::test_every_help_of_the_installed_command_exits_0": ("process",),
    "test_options.py::test_no_execute_over_stdio_runs_no_code_in_any_profile": ("process",),
    "tools/test_agent_from_listing.py::test_an_agent_that_knows_only_the_listing_does_the_task": (
        "kernel",
    ),
    "tools/test_arguments.py::test_json_looking_strings_reach_every_tool_over_json_rpc": (
        "kernel",
    ),
    "tools/test_arguments.py::test_the_reported_cases_over_stdio": ("process",),
    "tools/test_execution.py::test_an_image_in_a_result_says_how_to_get_it": ("kernel",),
    "tools/test_spec_features.py::test_a_saved_pdf_export_links_*": ("kernel", "browser"),
    "tools/test_spec_features.py::test_restart_and_install_ask_*": ("kernel",),
    "tools/test_spec_features.py::test_a_kernelspec_that_is_not_installed_*": ("kernel",),
    "tools/test_spec_features.py::test_a_run_that_drew_an_image_links_to_it": ("kernel",),
    "tools/test_execution.py::test_kernel_state_survives_a_restart_through_save_and_restore": (
        "kernel",
    ),
    "tools/test_execution.py::test_kernels_can_be_listed_inspected_restarted_and_shut_down": (
        "kernel",
    ),
}

# Fixtures that start these.
FIXTURES: dict[str, tuple[str, ...]] = {
    "jupyter": ("jupyter",),
    "live_folder": ("jupyter",),
    "live_client": ("jupyter",),
    "start_jupyter": ("jupyter",),
    "ext_server": ("jupyter",),
    "ext_folder": ("jupyter",),
    "start_ext_server": ("jupyter",),
    "kernel_client": ("kernel",),
    "stdio_client": ("process",),
}


def scripts_of(item: pytest.Item) -> Script | None:
    """The test's kernel script, from ``kernel_scripts.py`` beside it (None: it has none)."""
    book = _book(item.path.parent / "kernel_scripts.py")
    return book.get(f"{item.path.name}::{getattr(item, 'originalname', item.name)}")


@functools.cache
def _book(path: Path) -> dict[str, Script]:
    """The ``SCRIPTS`` of a ``kernel_scripts.py`` (empty: there is none)."""
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location(f"kernel_scripts_{abs(hash(path))}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    book: dict[str, Script] = module.SCRIPTS
    return book


def _markers_of(item: pytest.Item) -> set[str]:
    found: set[str] = set()
    rel = item.path.relative_to(TESTS_DIR) if item.path.is_relative_to(TESTS_DIR) else item.path
    if rel is not item.path and len(rel.parts) > 1:
        found.update(FOLDERS.get(rel.parts[0], ()))
    found.update(FILES.get(rel.as_posix(), ()))
    name = f"{rel.as_posix()}::{getattr(item, 'originalname', item.name)}"
    for pattern, markers in TESTS.items():
        if fnmatch.fnmatchcase(name, pattern):
            found.update(markers)
    for fixture in getattr(item, "fixturenames", ()):
        found.update(FIXTURES.get(fixture, ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("store_mode") == "live":
        found.add("jupyter")
    return found


SCRIPT_KEY = pytest.StashKey[Script]()


def mark(item: pytest.Item) -> None:
    """Give ``item`` the markers of what it starts (see the module docstring)."""
    for name in sorted(_markers_of(item) - {m.name for m in item.iter_markers()}):
        item.add_marker(name)
    script = scripts_of(item)
    if script is not None:
        item.stash[SCRIPT_KEY] = script
        for name in ("kernel", "scripted"):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)


def heavy(item: pytest.Item) -> list[str]:
    """What the test starts that the quick loop leaves out."""
    names = [m for m in HEAVY if item.get_closest_marker(m) is not None]
    if item.get_closest_marker("scripted") is not None and "kernel" in names:
        names.remove("kernel")
    return names


# -- the pytest hooks ---------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the quick loop: leave out tests that start kernels, Jupyter Servers, JupyterHub, "
        "Chromium or nbrelay processes; run scripted kernel tests on the scripted kernel; "
        f"{QUICK_TIMEOUT} s per test",
    )


def quick(config: pytest.Config) -> bool:
    return bool(config.getoption("quick", default=False))


def pytest_configure(config: pytest.Config) -> None:
    if quick(config):
        _Guard.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    _Guard.uninstall()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under --quick, folders and files whose every test starts something are not even imported
    (``corpus/test_world.py`` would fetch the corpus to list its tests)."""
    if not quick(config) or not collection_path.is_relative_to(TESTS_DIR):
        return None
    rel = collection_path.relative_to(TESTS_DIR).as_posix()
    if rel in QUICK_LEAVES_OUT or set(FOLDERS.get(rel, ())) | set(FILES.get(rel, ())):
        return True
    return None


QUICK_COUNTS = pytest.StashKey[tuple[int, int, int]]()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Under --quick, say what the loop left out: it is not the full run."""
    counts = config.stash.get(QUICK_COUNTS, None)
    if counts is None:
        return
    kept, scripted, left_out = counts
    skipped = sorted(
        f"tests/{p}"
        for p in {*FOLDERS, *FILES, *QUICK_LEAVES_OUT}
        if p.split("/")[0] not in FOLDERS or p in FOLDERS
    )
    terminalreporter.write_line(
        f"--quick: {kept} tests, {scripted} of them on the scripted kernel; left out "
        f"{left_out} tests that start a kernel, server, browser or process, and "
        f"{', '.join(skipped)} not collected. The full run (bash scripts/test) runs them all, "
        "and the scripted ones on real kernels."
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        mark(item)
    if not quick(config):
        return
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        (left_out if heavy(item) else kept).append(item)
    config.stash[QUICK_COUNTS] = (
        len(kept),
        sum(item.get_closest_marker("scripted") is not None for item in kept),
        len(left_out),
    )
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    if config.getoption("timeout", default=None) is None:
        for item in kept:
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(QUICK_TIMEOUT))


@pytest.fixture(autouse=True)
def quick_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Under --quick: a scripted test's kernels are scripted; a test that starts something
    heavy fails."""
    if not quick(request.config):
        yield
        return
    item = request.node
    providers: list[ScriptedKernels] = []
    script = item.stash.get(SCRIPT_KEY, None)
    if script is not None:

        def scripted(*args: Any, **kwargs: Any) -> ScriptedKernels:
            provider = ScriptedKernels(script)
            providers.append(provider)
            return provider

        monkeypatch.setattr("nbrelay.kernels.local.local_kernels", scripted)
    _Guard.current = item.nodeid
    try:
        yield
    finally:
        _Guard.current = None
    started = _Guard.refused.pop(item.nodeid, [])
    if started:
        pytest.fail("\n".join(started), pytrace=False)
    missing = [code for provider in providers for code in provider.missing]
    if missing:
        key = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        pytest.fail(
            f"--quick: code ran on the scripted kernel with no reply scripted for it: "
            f"{missing}; script it in {item.path.parent.name}/kernel_scripts.py under {key!r} "
            "(or take the test out of SCRIPTS: it then runs on real kernels only)",
            pytrace=False,
        )


# -- what a command line starts -----------------------------------------------------------


def classify(argv: Sequence[str]) -> str | None:
    """The marker a command needs (None: nothing the quick loop leaves out)."""
    words = [os.path.basename(str(a)) for a in argv]
    text = " ".join(str(a) for a in argv)
    if any(k in text for k in ("ipykernel", "fault_kernels", "NotebookClient")) or (
        "deno" in words and "jupyter" in words
    ):
        return "kernel"
    if "jupyterhub" in words or "configurable-http-proxy" in text:
        return "hub"
    jupyter = ("jupyterlab", "jupyter_server", "kernel_gateway", "jupyterhub-singleuser")
    if any(w in jupyter or w.startswith("jupyter-lab") for w in words):
        return "jupyter"
    if any("chrom" in w for w in words) or "run-driver" in words:
        return "browser"
    if "nbrelay" in words:
        return "process"
    return None


WHAT = {
    "kernel": "a kernel",
    "jupyter": "a Jupyter Server",
    "hub": "a JupyterHub",
    "browser": "Chromium",
    "process": "nbrelay as a process of its own",
}


class QuickRefusal(RuntimeError):
    """Raised by ``subprocess.Popen`` under --quick for something the quick loop leaves out."""


class _Guard:
    """Under --quick, ``subprocess.Popen`` refuses to start what a marker should have kept out
    (every way of starting a process goes through it: jupyter_client, asyncio, anyio)."""

    original: Any = None
    current: str | None = None
    refused: dict[str, list[str]] = {}  # noqa: RUF012 - one registry for the run
    lock = threading.Lock()

    @classmethod
    def install(cls) -> None:
        if cls.original is not None:
            return
        cls.original = original = subprocess.Popen.__init__

        def guarded(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
            argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
            marker = classify([os.fsdecode(a) for a in argv])
            if marker is not None:
                cls.refuse(marker, argv)
            original(self, args, *rest, **kwargs)

        subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]

    @classmethod
    def uninstall(cls) -> None:
        if cls.original is not None:
            subprocess.Popen.__init__ = cls.original  # type: ignore[method-assign]
            cls.original = None

    @classmethod
    def refuse(cls, marker: str, argv: Sequence[Any]) -> None:
        command = " ".join(os.fsdecode(a) for a in argv)
        message = (
            f"--quick: this test started {WHAT[marker]} ({command[:200]}); the quick loop "
            f"leaves such tests out: mark it `{marker}` (tests/markers.py's tables, or "
            f"@pytest.mark.{marker})"
        )
        if marker == "kernel":
            message += ", or script its kernel in kernel_scripts.py beside it"
        with cls.lock:
            cls.refused.setdefault(cls.current or "(outside a test)", []).append(message)
        raise QuickRefusal(message)
