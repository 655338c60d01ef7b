"""Looking inside a notebook's kernel: variables, visualisation, packages, saved state."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.to_thread

from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.errors import (
    InvalidArgument,
    KernelError,
    Unsupported,
    act,
)
from nbrelay.kernels import introspect, packages, visualize
from nbrelay.kernels.execution import Runner
from nbrelay.notebook import address
from nbrelay.notebook.address import CellRef
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.runners import Kernels
from nbrelay.workspace.state_files import StateFiles

logger = logging.getLogger("nbrelay")


# What to do instead, in a notebook whose kernel is not Python's.
_INSTEAD = {
    "visualize_cell": "Draw it with the kernel's own plotting code: execute(path={path!r}, code=…).",
    "list_variables": "Run code in the notebook to look at its state: execute(path={path!r}, code=…).",
    "inspect_variable": "Run code in the notebook to look at its state: execute(path={path!r}, code=…).",
    "install_packages": (
        "Install with the kernel's own package manager in a cell: execute(path={path!r}, code=…)."
    ),
    "save_kernel_state": (
        "Only a Python kernel's variables can be kept across a restart; after one, re-run the "
        "cells that define them."
    ),
    "restore_kernel_state": (
        "Only a Python kernel's variables can be kept across a restart; re-run the cells that "
        "define them."
    ),
}


class Inspect:
    """Variables, visualisation, package installs and kernel state, asked of the notebook's
    kernel (``kernels``) with nbrelay's introspection snippets."""

    def __init__(
        self, settings: Settings, notebooks: Notebooks, kernels: Kernels, state: StateFiles
    ) -> None:
        self._settings = settings
        self._notebooks = notebooks
        self._kernels = kernels
        self._state = state

    # -- looking inside the kernel --------------------------------------------------------

    async def _python_runner(self, path: str, caller: Caller, what: str) -> Runner:
        snap = await self._notebooks.read(path, caller)
        runner = await self._kernels.runner(snap, caller)
        if runner.session.info.language != "python":
            raise Unsupported(
                f"{what} needs a Python kernel; {snap.path!r} runs "
                f"{runner.session.info.name!r} ({runner.session.info.language}).",
                hint=_INSTEAD[what].format(path=snap.path),
            )
        return runner

    async def visualize_cell(
        self,
        path: str,
        caller: Caller,
        cell: CellRef,
        *,
        kind: str = "auto",
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Draw a cell's result (or ``options['expression']``) as a chart or graph (PNG, base64
        in ``png``) or give it as table data, in the notebook's Python kernel."""
        opts = dict(options or {})
        _check_visual(kind, opts)
        snap = await self._notebooks.read(path, caller)
        found = snap.notebook.cells[address.resolve_one(snap.notebook.ids, cell)]
        count = found.get("execution_count")
        if not opts.get("expression") and (found.get("cell_type") != "code" or count is None):
            raise InvalidArgument(
                f"cell {found['id']!r} has no result to visualise: it has not run.",
                hint=f"{act('run_first')}, or pass options={{'expression': 'df'}}.",
            )
        runner = await self._python_runner(path, caller, "visualize_cell")
        code = visualize.snippet(count if isinstance(count, int) else None, kind, opts)
        done = await self._kernels.ask(runner, caller, code, "visualising the cell")
        if done.get("error") is None:
            return {**done, "path": snap.path, "cell": found["id"]}
        _visual_error(done, f"cell {found['id']!r}'s result", count)

    async def visualize_value(
        self, value: Any, *, kind: str = "auto", options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``visualize_cell`` for a JSON value that comes from a kernel without Python (Deno):
        the same code draws it, in a child Python process (matplotlib from nbrelay's own
        environment), with a time limit."""
        opts = {k: v for k, v in dict(options or {}).items() if k != "expression"}
        _check_visual(kind, opts)
        shim = (
            "import json as _j, sys as _s\n"
            "class _Shell:\n    user_ns = {'_nbrelay_value': _j.loads(_s.stdin.read())}\n"
            "def get_ipython():\n    return _Shell\n"
        )
        code = shim + visualize.snippet(None, kind, {**opts, "expression": "_nbrelay_value"})
        from nbrelay.kernels.base import LaunchPolicy

        env = LaunchPolicy(keep_env=self._settings.kernel_env).environment(os.environ)
        env["MPLBACKEND"] = "Agg"
        try:
            with anyio.fail_after(120):
                ran = await anyio.run_process(
                    [sys.executable, "-c", code],
                    input=json.dumps(value).encode("utf-8"),
                    check=False,
                    env=env,
                )
        except TimeoutError as exc:
            raise KernelError("drawing the value did not finish within 120 s.") from exc
        printed = ran.stdout.decode("utf-8", "replace")
        if introspect.MARKER not in printed:
            tail = ran.stderr.decode("utf-8", "replace").strip()[-500:]
            raise KernelError(
                f"drawing the value failed ({sys.executable}): {tail or 'no output'}."
            )
        done = introspect.parse([{"output_type": "stream", "text": printed}], "visualising")
        if done.get("error") == "no_matplotlib":
            raise Unsupported(
                "drawing a chart of this value needs matplotlib in nbrelay's own environment.",
                hint='Install it next to nbrelay (pip install matplotlib), or use type="table".',
            )
        if done.get("error") is None:
            return done
        _visual_error(done, "the value", None)

    async def evaluate_json(self, path: str, caller: Caller, expression: str) -> Any:
        """The value of a TypeScript/JavaScript expression in the notebook's (Deno) kernel, as
        JSON (``JSON.stringify``); Python kernels use ``inspect_variable``."""
        snap = await self._notebooks.read(path, caller)
        runner = await self._kernels.runner(snap, caller)
        language = runner.session.info.language.lower()
        if language not in ("typescript", "javascript"):
            raise Unsupported(
                f"evaluating a JavaScript expression needs a TypeScript/JavaScript kernel; "
                f"{snap.path!r} runs {runner.session.info.name!r} ({language}).",
            )
        code = (
            f"console.log({json.dumps(introspect.MARKER)} + JSON.stringify("
            f"{{ value: await (\n{expression}\n) }}))"
        )
        found = await self._kernels.ask(runner, caller, code, "evaluating the expression")
        return found.get("value")

    async def forget_saved_state(self, path: str) -> None:
        """Remove the kernel states saved for a notebook (save_kernel_state, persisted
        sessions), as when its session ends for good."""
        rel = self._notebooks.relative(path)
        for name in (self._state.state_file(rel), self._state.session_state_file(rel)):
            await self._state.remove(name)

    async def list_variables(
        self, path: str, caller: Caller, *, limit: int = 100
    ) -> dict[str, Any]:
        runner = await self._python_runner(path, caller, "list_variables")
        return await self._kernels.ask(
            runner, caller, introspect.list_variables(limit), "listing variables"
        )

    async def inspect_variable(
        self, path: str, caller: Caller, name: str, *, limit: int
    ) -> dict[str, Any]:
        if not name.isidentifier():
            raise InvalidArgument(
                f"{name!r} is not a variable name.", hint="Give a plain name such as df."
            )
        runner = await self._python_runner(path, caller, "inspect_variable")
        found = await self._kernels.ask(
            runner, caller, introspect.inspect_variable(name, limit), "inspecting"
        )
        if found.get("missing"):
            names = ", ".join(found.get("names") or []) or "none"
            raise InvalidArgument(
                f"the kernel has no variable named {name!r}.",
                hint=f"Defined names: {names}.",
            )
        return found

    async def install_packages(
        self,
        path: str,
        caller: Caller,
        requirements: Sequence[str],
        *,
        time_limit: float = 600,
        prefer_uv: bool = False,
        progress: packages.Progress | None = None,
    ) -> packages.Installed:
        """Install into the environment of the interpreter the notebook's kernel runs (see
        ``kernels.packages``), with pip, or with ``uv pip`` when ``prefer_uv`` and uv is on the
        kernel's PATH (or when that Python has no pip); ``progress`` hears how it goes."""
        checked = validate_requirements(requirements)
        runner = await self._python_runner(path, caller, "install_packages")
        found = await self._kernels.ask(
            runner, caller, introspect.python_environment(), "finding the kernel's Python"
        )
        python, prefix = str(found["python"]), str(found["prefix"])
        from nbrelay.kernels.base import LaunchPolicy

        env = LaunchPolicy(keep_env=self._settings.kernel_env).environment(os.environ)
        env["PIP_NO_INPUT"] = "1"
        has_pip = bool(found.get("pip"))
        uv = shutil.which("uv", path=env.get("PATH")) if prefer_uv or not has_pip else None
        if uv is None and not has_pip:
            raise KernelError(
                f"the kernel's Python ({python}) has no pip, and uv is not on PATH.",
                hint=f"Install pip into that environment ({python} -m ensurepip), or uv.",
            )
        listing = "listing the kernel's packages"
        before = packages.distributions(
            await self._kernels.ask(runner, caller, introspect.distributions(), listing)
        )
        own = packages.same_environment(prefix)
        holding = tempfile.TemporaryDirectory(prefix="nbrelay-held-") if own else nullcontext("")
        with holding as folder:
            constraints = None
            if own:  # nbrelay's own requirements held at their versions
                held = await anyio.to_thread.run_sync(packages.held)
                constraints = Path(folder) / "nbrelay-held.txt"
                text = "".join(f"{name}=={version}\n" for name, version in sorted(held.items()))
                await anyio.Path(constraints).write_text(text, encoding="utf-8")
            argv = packages.command(python, checked, uv=uv, constraints=constraints)
            code, output = await packages.run(argv, env, time_limit=time_limit, progress=progress)
        after = packages.distributions(
            await self._kernels.ask(runner, caller, introspect.distributions(), listing)
        )
        installed, unchanged = packages.changes(before, after, checked)
        note = None
        if own:
            note = (
                f"the kernel runs in nbrelay's own environment ({prefix}), so that is where "
                "this installed, with nbrelay's own packages held at their versions (an "
                "install that would change one fails). To keep this notebook's packages apart, "
                "give it a kernel from an environment of its own (in that environment: pip "
                "install ipykernel, then python -m ipykernel install --user --name NAME)."
            )
        return packages.Installed(
            python=python,
            exit_code=code,
            installed=installed,
            unchanged=unchanged,
            output=output[-3000:],
            failure=packages.failure(output) if code else "",
            note=note,
        )

    async def save_kernel_state(
        self, path: str, caller: Caller, *, to: str | None = None
    ) -> dict[str, Any]:
        """Save ``path``'s kernel variables into the state file of ``to`` (default: ``path``)."""
        runner = await self._python_runner(path, caller, "save_kernel_state")
        target = self._state.state_file(self._notebooks.relative(to or path))
        await self._state.make_folder(target)
        found = await self._kernels.ask(
            runner, caller, introspect.save_state(target), "saving the state"
        )
        if found.get("no_dill"):
            raise Unsupported(
                "the kernel cannot import dill, which saves its state.",
                hint='Install it first: install_packages(packages=["dill"]).',
            )
        return found

    async def restore_kernel_state(self, path: str, caller: Caller) -> dict[str, Any]:
        runner = await self._python_runner(path, caller, "restore_kernel_state")
        source = self._state.state_file(self._notebooks.relative(path))
        if not await self._kernels.state_exists(runner, caller, source):
            raise InvalidArgument(
                f"{self._notebooks.relative(path)!r} has no saved kernel state.",
                hint=act("save_state"),
            )
        found = await self._kernels.ask(
            runner, caller, introspect.restore_state(source), "restoring the state"
        )
        if found.get("no_dill"):
            raise Unsupported(
                "the kernel cannot import dill, which restores its state.",
                hint='Install it first: install_packages(packages=["dill"]).',
            )
        return found


def validate_requirements(requirements: Sequence[str]) -> list[str]:
    """Each requirement as PEP 508 (``pandas>=2``, ``requests[socks]``); options are refused."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not requirements:
        raise InvalidArgument("no packages given.", hint='Give requirements like ["pandas>=2"].')
    out = []
    for item in requirements:
        text = item.strip()
        if not text or text.startswith("-"):
            raise InvalidArgument(
                f"{item!r} is not a package requirement: options such as --index-url or -e are "
                "refused.",
                hint='Give PEP 508 requirements only, like "pandas>=2" or "requests[socks]".',
            )
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise InvalidArgument(
                f"{item!r} is not a valid PEP 508 requirement: {exc}.",
                hint='Write it like "pandas>=2.0" or "scikit-learn==1.5.*".',
            ) from exc
        out.append(text)
    return out


def _visual_error(done: Mapping[str, Any], what: str, count: Any) -> NoReturn:
    """Raise the error a failed visualisation (``done["error"]``) stands for."""
    problem = done.get("error")
    messages = {
        "no_result": (
            f"the kernel has no result for {what} (execution {count}): the cell's last line is "
            "not an expression, or the kernel restarted since it ran.",
            "Run the cell again, end it with the value to show, or pass "
            "options={'expression': 'name'}.",
        ),
        "expression": (
            f"the expression failed in the kernel: {done.get('detail')}.",
            "Pass a Python expression that names the data, e.g. options={'expression': 'df'}.",
        ),
        "not_tabular": (
            f"a {done.get('type')} cannot be shown as a table or chart.",
            "Give a DataFrame, Series, array, dict, or list of rows, numbers or records.",
        ),
        "not_graph": (
            f"a {done.get('type')} is not a graph.",
            "Give a networkx graph or an adjacency dict {node: [neighbours]}.",
        ),
        "no_numbers": (
            f"none of the columns {done.get('columns')} is numeric, so there is nothing to chart.",
            "Use type='table', or name numeric columns in options y.",
        ),
        "no_column": (
            f"there is no column {done.get('column')!r}; the columns are {done.get('columns')}.",
            "Name one of those columns in options x or y.",
        ),
        "no_matplotlib": (
            "the kernel cannot import matplotlib, which draws the chart.",
            'Install it (install_packages(packages=["matplotlib"])) or use type="table".',
        ),
    }
    message, hint = messages.get(str(problem), (f"visualising failed: {problem}.", ""))
    if problem == "no_matplotlib":
        raise Unsupported(message, hint=hint)
    raise InvalidArgument(message, hint=hint)


def _check_visual(kind: str, opts: Mapping[str, Any]) -> None:
    """Refuse an unknown visualisation kind or chart, naming the ones there are."""
    if kind not in visualize.KINDS:
        raise InvalidArgument(
            f"unknown visualisation {kind!r}.", hint=f"Kinds: {', '.join(visualize.KINDS)}."
        )
    if opts.get("chart") not in (None, *visualize.CHARTS):
        raise InvalidArgument(
            f"unknown chart {opts['chart']!r}.", hint=f"Charts: {', '.join(visualize.CHARTS)}."
        )
