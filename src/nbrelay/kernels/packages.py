"""Installing packages into a Python kernel's environment.

The workspace (``Inspect.install_packages``) asks the kernel which interpreter it runs
(``introspect.python_environment``): that interpreter's environment is where the kernel imports
from, so it is where pip installs (``command``: ``python -m pip install``, or ``uv pip install
--python``). ``run`` runs the installer with its output streamed line by line to a progress
callback, bounded in time and killed when the request is cancelled; ``changes`` says what it
installed, from the kernel's own list of distributions before and after.

A kernel may run in nbrelay's own environment: jupyter_client starts a kernelspec whose argv
begins with ``python`` (the default ``python3`` kernelspec, ipykernel's own) with the
interpreter that runs nbrelay. An install there goes ahead, since nowhere else would the kernel
find the package, but with nbrelay's own requirements held at their installed versions
(``held``, given to the installer as constraints): it may add packages beside nbrelay, never
change one nbrelay needs.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL, PIPE, STDOUT

import anyio

from nbrelay.errors import KernelError

Progress = Callable[[str], Awaitable[None]]
# name (canonical) -> (name as the distribution spells it, version)
Distributions = dict[str, tuple[str, str]]

PROGRESS_EVERY = 1.0  # seconds between progress notifications while new lines come
HEARTBEAT_EVERY = 10.0  # seconds between progress notifications while the installer is silent
LOG_CHARS = 2000  # characters of the installer's output a failed install shows


@dataclass(frozen=True)
class Installed:
    """What an install did: the kernel's interpreter, whether the installer succeeded, the
    distributions it added or changed (``name version``, ``(was old)`` for a changed one) and
    the requested ones that were already there; its output (the end of it) and, on failure, the
    part that says why; a note on where it installed."""

    python: str
    exit_code: int
    installed: tuple[str, ...]
    unchanged: tuple[str, ...]
    output: str
    failure: str
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def same_environment(prefix: str) -> bool:
    """Whether a kernel whose ``sys.prefix`` is ``prefix`` runs in nbrelay's own environment."""
    return os.path.realpath(prefix) == os.path.realpath(sys.prefix)


def held() -> dict[str, str]:
    """nbrelay's requirements, all the way down, at their installed versions: ``{name:
    version}`` (canonical names; nbrelay itself left out)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [("nbrelay", frozenset())]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if key != "nbrelay":
            found[key] = dist.version
        for text in dist.requires or ():
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            wanted = req.marker is None or any(
                req.marker.evaluate({"extra": extra}) for extra in (*extras, "")
            )
            if wanted:
                todo.append((req.name, frozenset(req.extras)))
    return found


def command(
    python: str, requirements: Sequence[str], *, uv: str | None, constraints: Path | None
) -> list[str]:
    """The installer's command line: pip of the kernel's interpreter, or ``uv`` for it."""
    if uv is not None:
        argv = [uv, "pip", "install", "--python", python]
    else:
        argv = [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
        ]
    if constraints is not None:
        argv += ["--constraint", str(constraints)]
    return [*argv, "--", *requirements]


async def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    time_limit: float,
    progress: Progress | None = None,
) -> tuple[int, str]:
    """Run the installer (stdout and stderr together): its exit code and the end of its output.

    ``progress`` gets the newest line at most every ``PROGRESS_EVERY`` seconds while lines come,
    and a line saying it still runs every ``HEARTBEAT_EVERY`` seconds while it is silent.

    Raises:
        KernelError: it could not be started, or it ran past ``time_limit`` (it is killed).
    """
    tool = "uv" if Path(argv[0]).name.startswith("uv") else "pip"
    lines: deque[str] = deque(maxlen=400)
    started = time.monotonic()
    try:
        process = await anyio.open_process(
            list(argv), stdin=DEVNULL, stdout=PIPE, stderr=STDOUT, env=dict(env)
        )
    except OSError as exc:
        raise KernelError(f"could not run {tool} ({argv[0]}): {exc}.") from exc

    stdout = process.stdout
    if stdout is None:  # never: it was opened with stdout=PIPE
        raise KernelError(f"{tool} started without its output.")

    async def read() -> None:
        pending = b""
        async for chunk in stdout:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            lines.extend(_line(raw) for raw in complete)
        if pending:
            lines.append(_line(pending))

    async def tell(progress: Progress) -> None:
        await progress(f"{tool} started: {' '.join(argv[argv.index('--') + 1 :])}")
        told, told_at = "", time.monotonic()
        while True:
            await anyio.sleep(PROGRESS_EVERY)
            newest = next((x for x in reversed(lines) if x), "")
            now = time.monotonic()
            if newest != told or now - told_at >= HEARTBEAT_EVERY:
                await progress(f"{tool} running {now - started:.0f} s: {newest or '…'}")
                told, told_at = newest, now

    try:
        with anyio.fail_after(time_limit):
            async with anyio.create_task_group() as tg:
                if progress is not None:
                    tg.start_soon(tell, progress)
                await read()
                code = await process.wait()
                tg.cancel_scope.cancel()
    except TimeoutError as exc:
        raise KernelError(
            f"{tool} did not finish within {time_limit:g} s and was stopped.",
            hint="Retry; a large package may need a faster network.",
        ) from exc
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()
    return code, "\n".join(lines)


def _line(raw: bytes) -> str:
    """One line of output as the terminal would leave it (the text after its last ``\\r``)."""
    return raw.decode("utf-8", "replace").rstrip("\r").rsplit("\r", 1)[-1].rstrip()


def failure(output: str) -> str:
    """The part of a failed installer's output that says why: from its first error line on
    (pip's ``ERROR:``, uv's ``error:`` and ``×``), else its end; at most ``LOG_CHARS``."""
    lines = output.splitlines()
    first = next(
        (
            i
            for i, line in enumerate(lines)
            if line.lstrip().startswith(("ERROR", "error:", "×", "  ×"))
        ),
        None,
    )
    text = "\n".join(lines[first:] if first is not None else lines[-20:]).strip()
    if len(text) > LOG_CHARS:
        text = text[: LOG_CHARS - 1] + "…"
    return text


def distributions(found: Mapping[str, object]) -> Distributions:
    """The kernel's answer to ``introspect.distributions`` as ``{canonical name: (name,
    version)}``; where two entries of ``sys.path`` hold one name, the first wins (as imports)."""
    from packaging.utils import canonicalize_name

    out: Distributions = {}
    raw = found.get("dists")
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, list) and len(item) == 2:
            name, version = str(item[0]), str(item[1])
            out.setdefault(canonicalize_name(name), (name, version))
    return out


def changes(
    before: Distributions, after: Distributions, requested: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What an install added or changed (``name version``, ``name new (was old)``), and which
    of the ``requested`` distributions were there already, unchanged (``name version``)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    installed = []
    for key, (name, version) in sorted(after.items()):
        old = before.get(key)
        if old is None:
            installed.append(f"{name} {version}")
        elif old[1] != version:
            installed.append(f"{name} {version} (was {old[1]})")
    wanted = dict.fromkeys(canonicalize_name(Requirement(r).name) for r in requested)
    unchanged = [
        f"{after[key][0]} {after[key][1]}"
        for key in wanted
        if key in after and before.get(key) == after[key]
    ]
    return tuple(installed), tuple(unchanged)
