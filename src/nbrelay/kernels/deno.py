"""How the Deno kernel (TypeScript/JavaScript) is launched under nbrelay's limits.

``deno jupyter`` takes no flags of its own beyond the connection file, and V8 reserves a large
address range when it starts ("Oilpan: CagedHeap reservation"), so ``RLIMIT_AS`` (what
``--kernel-memory`` sets for other kernels) stops Deno from starting at all. For Deno the memory
limit is V8's own: ``DENO_V8_FLAGS=--max-old-space-size=<MB>``, which Deno reads at start; a
cell that needs more heap ends the kernel with "JavaScript heap out of memory" instead. The
CPU-time limit (``RLIMIT_CPU``) applies as for any kernel.
"""

from __future__ import annotations

from dataclasses import replace

from nbrelay.kernels.base import LaunchPolicy
from nbrelay.kernels.limits import KernelLimits
from nbrelay.kernels.sandbox import IsolatedPolicy

KERNEL_NAME = "deno"


def heap_flags(memory_mb: int) -> str:
    """The V8 flags that cap a Deno kernel's heap at ``memory_mb`` megabytes."""
    return f"--max-old-space-size={memory_mb}"


def launch_policy(policy: LaunchPolicy, kernel_name: str) -> LaunchPolicy:
    """``policy`` as it applies to a kernel named ``kernel_name``: for Deno, the memory limit
    moves from ``RLIMIT_AS`` to V8's heap flags; any other kernel keeps ``policy``."""
    if kernel_name != KERNEL_NAME or not isinstance(policy, IsolatedPolicy):
        return policy
    memory = policy.limits.memory_mb
    if not memory:
        return policy
    env = {k: v for k, v in policy.env.items() if k != "MALLOC_ARENA_MAX"}
    env["DENO_V8_FLAGS"] = heap_flags(memory)
    limits = KernelLimits(None, policy.limits.cpu_seconds)
    return replace(policy, env=env, limits=limits)
