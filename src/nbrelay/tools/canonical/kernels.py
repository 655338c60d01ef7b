"""The notebook's kernel: interrupt, restart or shut down, list kernels, install packages."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from nbrelay.caller import Caller
from nbrelay.kernels.base import KernelInfo
from nbrelay.tools import asking
from nbrelay.tools.arguments import NbPath
from nbrelay.tools.results import ExecutionResult, iso
from nbrelay.tools.runs import finished, progress_reporter
from nbrelay.workspace import Workspace, validate_requirements


# A kernel as results show it. Its working folder is the notebook's (never shown: on a server it
# is an absolute path of that machine); ``pid`` and times only in list_kernels.
class KernelView(BaseModel):
    path: str
    kernel: str
    state: str
    pid: int | None = None
    started: str | None = None
    last_activity: str | None = None
    restarts: int | None = None


class SpecView(BaseModel):
    name: str
    display_name: str
    language: str


class KernelList(BaseModel):
    kernels: list[KernelView]
    kernelspecs: list[SpecView]


class KernelResult(BaseModel):
    path: str
    kernel: KernelView | None = None
    note: str
    execution: ExecutionResult | None = None


class InstallResult(BaseModel):
    path: str
    python: str
    ok: bool
    installed: list[str] | None = None
    unchanged: list[str] | None = None
    note: str | None = None
    log: str | None = None


def kernel_view(info: KernelInfo, *, listed: bool = False) -> KernelView:
    """``listed``: as list_kernels shows it, with its process id and times."""
    view = KernelView(
        path=info.key, kernel=info.name, state=info.state, restarts=info.restarts or None
    )
    if listed:
        view.pid = info.pid
        view.started = iso(info.started)
        view.last_activity = iso(info.last_activity)
    return view


async def interrupt_kernel(ws: Workspace, caller: Caller, path: NbPath) -> KernelResult:
    """Interrupt the running cell (Ctrl-C); variables are kept. Example: interrupt_kernel(path="a.ipynb")."""
    info, ended = await ws.kernels.interrupt_kernel(path, caller)
    return KernelResult(path=info.key, kernel=kernel_view(info), note=ended or "interrupted")


async def restart_kernel(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    ctx: Context,
    clear_outputs: bool = False,
    run_all: bool = False,
    shutdown: bool = False,
) -> KernelResult:
    """Restart the kernel (variables lost), optionally clear outputs and run all; shutdown=true stops it.

    Example: restart_kernel(path="a.ipynb", run_all=true).
    """
    if asking.can_ask():
        rel = ws.notebooks.relative(path)
        running = ws.kernels.kernel_info(rel)
        if running is not None and running.state != "dead":
            act = "Shut down" if shutdown else "Restart"
            await asking.confirm(
                "restart_kernel",
                f"{act} the kernel of {rel}? Its variables will be lost.",
                refused=f"the kernel of {rel!r} was not {'shut down' if shutdown else 'restarted'}",
                hint="Its variables are kept; save_kernel_state can keep them across a restart.",
            )
    if shutdown:
        stopped = await ws.kernels.shutdown_kernel(path, caller)
        note = "kernel shut down" if stopped else "the notebook had no running kernel"
        return KernelResult(path=ws.notebooks.relative(path), note=note)
    info = await ws.kernels.restart_kernel(path, caller)
    result = KernelResult(path=info.key, kernel=kernel_view(info), note="kernel restarted")
    if clear_outputs:
        await ws.editing.clear_outputs(path, caller)
    if run_all:
        result.execution = await finished(ws, await ws.runs.execute(path, caller, [":"]), ctx)
    return result


async def list_kernels(ws: Workspace, caller: Caller) -> KernelList:
    """List running kernels (one per notebook) and kernelspecs. Example: list_kernels()."""
    running, specs = await ws.kernels.list_kernels(caller)
    return KernelList(
        kernels=[kernel_view(k, listed=True) for k in running],
        kernelspecs=[
            SpecView(name=s.name, display_name=s.display_name, language=s.language) for s in specs
        ],
    )


async def install_packages(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    packages: Annotated[list[str], Field(description='PEP 508: ["pandas>=2"].')],
    ctx: Context,
) -> InstallResult:
    """pip-install into the kernel's own Python; no options (-e, --index-url).

    Sends progress; returns what was installed, with versions (pip's log on failure).
    Example: install_packages(path="a.ipynb", packages=["polars>=1"]).
    """
    if asking.can_ask():
        listed = ", ".join(validate_requirements(packages))  # bad input is refused, not asked
        await asking.confirm(
            "install_packages",
            f"Install {listed} into the Python of {ws.notebooks.relative(path)}'s kernel (pip)?",
            refused=f"nothing was installed ({listed})",
            hint="Install only what the person agrees to.",
        )
    done = await ws.inspect.install_packages(
        path, caller, packages, progress=progress_reporter(ctx)
    )
    return InstallResult(
        path=ws.notebooks.relative(path),
        python=done.python,
        ok=done.ok,
        installed=list(done.installed) or None,
        unchanged=list(done.unchanged) or None,
        note=done.note,
        log=done.failure or None,
    )
