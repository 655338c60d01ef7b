"""How the Deno kernel (TypeScript/JavaScript) is launched under nbrelay's limits.

``deno jupyter`` takes no flags of its own beyond the connection file, and V8 reserves a large
address range when it starts ("Oilpan: CagedHeap reservation"), so ``RLIMIT_AS`` (what
``--kernel-memory`` sets for other kernels) stops Deno from starting at all. For Deno the memory
limit is V8's own: ``DENO_V8_FLAGS=--max-old-space-size=<MB>``, which Deno reads at start; a
cell that needs more heap ends the kernel with "JavaScript heap out of memory" instead. The
CPU-time limit (``RLIMIT_CPU``) applies as for any kernel.

Under the sandbox (``--sandbox``, ``--no-kernel-network``) Deno also gets nbrelay's permission
rules: ``deno jupyter`` grants its code every Deno permission and takes no flags, so the kernel
runs under ``deno_guard``, which answers Deno's permission checks (its permission broker) —
files only inside the notebook's folder, network as allowed — and carries the kernel's channels
between the ZeroMQ ``ipc`` sockets nbrelay uses in a sandbox and the loopback TCP ports that
``deno jupyter`` insists on (in its own network namespace).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nbrelay.kernels.base import LaunchPolicy
from nbrelay.kernels.limits import KernelLimits
from nbrelay.kernels.sandbox import IsolatedPolicy

KERNEL_NAME = "deno"
_ETC_UNNEEDED = ("passwd", "group")  # of the sandbox's /etc, what Deno kernels never read
GUARD = str(Path(__file__).with_name("deno_guard.py"))


def heap_flags(memory_mb: int) -> str:
    """The V8 flags that cap a Deno kernel's heap at ``memory_mb`` megabytes."""
    return f"--max-old-space-size={memory_mb}"


@dataclass(frozen=True)
class GuardedDeno(IsolatedPolicy):
    """An isolated Deno kernel: ``deno jupyter`` started by ``deno_guard`` (see the module
    docstring), inside the bwrap sandbox."""

    network: str = "none"  # deno_guard's --network: all, none or hosts

    def guard_options(self) -> list[str]:
        options = ["--network", self.network]
        if self.sandbox is not None and self.sandbox.filesystem:
            options += ["--folder", self.launch_cwd or os.getcwd()]
        for host in self.allow_hosts:
            options += ["--allow-host", host]
        for host in self.deny_hosts:
            options += ["--deny-host", host]
        if self.transport == "ipc":
            options.append("--forward")
        return options

    def command(self, argv: Sequence[str]) -> list[str]:
        if not argv:
            return super().command(argv)
        seen = (GUARD, os.path.realpath(argv[0]))
        launch = replace(self, launch_files=(*self.launch_files, *seen))
        guarded = [sys.executable, "-I", "-S", GUARD, *self.guard_options(), "--", *argv]
        return IsolatedPolicy.command(launch, guarded)


def launch_policy(policy: LaunchPolicy, kernel_name: str) -> LaunchPolicy:
    """``policy`` as it applies to a kernel named ``kernel_name``: for Deno, the memory limit
    moves from ``RLIMIT_AS`` to V8's heap flags, and a sandboxed Deno kernel runs under
    ``deno_guard``; any other kernel keeps ``policy``."""
    if kernel_name != KERNEL_NAME or not isinstance(policy, IsolatedPolicy):
        return policy
    memory = policy.limits.memory_mb
    if memory:
        env = {k: v for k, v in policy.env.items() if k != "MALLOC_ARENA_MAX"}
        env["DENO_V8_FLAGS"] = heap_flags(memory)
        policy = replace(policy, env=env, limits=KernelLimits(None, policy.limits.cpu_seconds))
    if policy.sandbox is None:
        return policy
    # An allow list names the only hosts (even with the network otherwise off); a deny list
    # takes hosts out of an allowed network. Deno's own checks hold the kernel to them, so its
    # namespace shares the network whenever it may use some (Python kernels then get none).
    network = "hosts" if policy.allow_hosts else "all" if policy.kernel_network else "none"
    # Deno opens a path itself after its permission check (deno_guard's answer), so a link
    # swapped in between reaches whatever the mount namespace shows: for Deno that is the
    # session's folder and the system files Deno and the guard need, without users and groups.
    etc = tuple(name for name in policy.sandbox.etc if name not in _ETC_UNNEEDED)
    sandbox = replace(policy.sandbox, network=network != "none", etc=etc)
    fields = {f: getattr(policy, f) for f in policy.__dataclass_fields__}
    return GuardedDeno(**{**fields, "sandbox": sandbox}, network=network)
