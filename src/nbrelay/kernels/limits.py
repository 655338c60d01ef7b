"""Resource limits for local kernels: address space and CPU time, set as rlimits on the process.

* Memory: ``RLIMIT_AS`` (the kernel's address space). An allocation past it fails inside the
  kernel: Python raises ``MemoryError``, which a Python kernel reports with the limit and what to
  do; the kernel and nbrelay keep running.
* CPU time: ``RLIMIT_CPU`` (seconds of CPU the kernel process may use in its lifetime). At the soft
  limit the kernel gets ``SIGXCPU``: a Python kernel turns it into an error in the running cell
  that names the limit; a restart gives a fresh budget. A few seconds later the hard limit kills
  a kernel that ignored it.

``MALLOC_ARENA_MAX=2`` keeps glibc from reserving address space per thread, so the memory limit
measures what the code allocates. Where rlimits do not exist (not Linux or macOS), asking for a
limit is refused at start-up: a limit is never silently ignored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from nbrelay.errors import Unsupported

CPU_GRACE = 5  # seconds between SIGXCPU and SIGKILL


@dataclass(frozen=True)
class KernelLimits:
    """Per-kernel limits: ``memory_mb`` of address space, ``cpu_seconds`` of CPU time."""

    memory_mb: int | None = None
    cpu_seconds: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.memory_mb or self.cpu_seconds)

    def check(self) -> None:
        """Refuse limits this machine cannot enforce."""
        if not self.active:
            return
        try:
            import resource
        except ImportError:  # pragma: no cover - Windows
            raise Unsupported(
                "kernel memory and CPU limits need POSIX rlimits, which this system lacks.",
                hint="Run nbrelay on Linux or macOS, or leave --kernel-memory and "
                "--kernel-cpu-time unset.",
            ) from None
        for name in ("RLIMIT_AS", "RLIMIT_CPU"):
            if not hasattr(resource, name):  # pragma: no cover - exotic platforms
                raise Unsupported(f"this system has no {name}, so the kernel limits cannot apply.")
        if self.memory_mb and sys.platform == "darwin":  # pragma: no cover - macOS
            raise Unsupported(
                "macOS does not enforce RLIMIT_AS, so --kernel-memory cannot be applied.",
                hint="Leave --kernel-memory unset on macOS.",
            )

    def preexec(self) -> Callable[[], None] | None:
        """A function that sets the limits in the child process before it runs the kernel."""
        if not self.active:
            return None
        memory = self.memory_mb * (1 << 20) if self.memory_mb else None
        cpu = self.cpu_seconds

        def apply() -> None:  # runs in the child, between fork and exec
            import resource

            if memory:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            if cpu:
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + CPU_GRACE))

        return apply

    def environment(self) -> dict[str, str]:
        return {"MALLOC_ARENA_MAX": "2"} if self.memory_mb else {}

    def kernel_code(self) -> str:
        """Startup code for a Python (IPython) kernel: errors that name the limits."""
        if not self.active:
            return ""
        return _KERNEL_CODE.format(memory=self.memory_mb or 0, cpu=self.cpu_seconds or 0)


# Runs once in a Python kernel (as IPKernelApp.exec_lines); leaves no names behind.
_KERNEL_CODE = """
def __nbrelay_limits(memory={memory}, cpu={cpu}):
    import signal, types
    from IPython import get_ipython
    shell = get_ipython()
    class CPUTimeLimitExceeded(RuntimeError):
        pass
    CPUTimeLimitExceeded.__module__ = "nbrelay"
    def on_cpu_limit(signum, frame):
        raise CPUTimeLimitExceeded(
            f"the kernel used up its CPU time limit of {{cpu}} s (nbrelay --kernel-cpu-time)."
            " Restart the kernel for a fresh budget; it is stopped if it keeps running."
        )
    def on_error(self, etype, value, tb, tb_offset=None):
        if issubclass(etype, MemoryError):
            detail = f" ({{value}})" if str(value) else ""
            value = etype(
                f"the kernel reached its memory limit of {{memory}} MB (nbrelay --kernel-memory)"
                f"{{detail}}. Free memory (del big objects), work on smaller pieces, or ask for a "
                "higher limit."
            )
        kept = []
        while tb is not None:
            if tb.tb_frame.f_code is not on_cpu_limit.__code__:
                kept.append(tb)
            tb = tb.tb_next
        for frame in reversed(kept):
            tb = types.TracebackType(tb, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
        self.showtraceback((etype, value, tb), tb_offset=tb_offset)
    caught = []
    if memory:
        caught.append(MemoryError)
    if cpu and hasattr(signal, "SIGXCPU"):
        caught.append(CPUTimeLimitExceeded)
        signal.signal(signal.SIGXCPU, on_cpu_limit)
    shell.set_custom_exc(tuple(caught), on_error)
__nbrelay_limits()
del __nbrelay_limits
"""
