"""Fault kernels: ``python -m tests.fault_kernels.kernel KIND -f CONNECTION_FILE``.

* ``deaf``: an IPython kernel that ignores SIGINT, so an interrupt never stops running code;
* ``dies_at_start``: writes a line on stderr and exits with code 3 before it answers;
* ``chatty``: an IPython kernel that writes to fd 1 and fd 2 of its own process at start.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp


class DeafKernel(IPythonKernel):
    """Runs code normally but never reacts to SIGINT."""

    implementation = "deaf"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def pre_handler_hook(self) -> None:
        # ipykernel installs its own SIGINT handler around each request; keep ignoring it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def post_handler_hook(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def main() -> None:
    kind = sys.argv.pop(1)
    if kind == "dies_at_start":
        sys.stderr.write("fault kernel: failing at start, as asked\n")
        sys.stderr.flush()
        os._exit(3)
    if kind == "chatty":
        os.write(1, b"chatty kernel writes to fd 1\n")
        os.write(2, b"chatty kernel writes to fd 2\n")
        IPKernelApp.launch_instance()
        return
    if kind == "deaf":
        IPKernelApp.launch_instance(kernel_class=DeafKernel)
        return
    raise SystemExit(f"unknown fault kernel {kind!r}")


if __name__ == "__main__":
    main()
