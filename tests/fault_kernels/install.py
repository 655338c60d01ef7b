"""Install the fault kernels as kernelspecs into a test's private Jupyter data folder."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KINDS = ("deaf", "dies_at_start", "chatty")


def install(data_dir: Path) -> list[str]:
    """Write ``fault-<kind>`` kernelspecs (and ``fault-missing``, whose command does not exist)."""
    names = []
    for kind in KINDS:
        spec = {
            "argv": [
                sys.executable,
                "-m",
                "tests.fault_kernels.kernel",
                kind,
                "-f",
                "{connection_file}",
            ],
            "display_name": f"Fault: {kind}",
            "language": "python",
            "env": {"PYTHONPATH": str(REPO)},
        }
        names.append(_write(data_dir, f"fault-{kind.replace('_', '-')}", spec))
    missing = {
        "argv": [str(REPO / "no-such-kernel-command"), "{connection_file}"],
        "display_name": "Fault: missing command",
        "language": "python",
    }
    names.append(_write(data_dir, "fault-missing", missing))
    return names


def _write(data_dir: Path, name: str, spec: Mapping[str, object]) -> str:
    folder = data_dir / "kernels" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1), "utf-8")
    return name


def install_others(data_dir: Path) -> list[str]:
    """Kernelspecs of real kernels not built on ipykernel, run by this interpreter:
    ``other-xpython`` (xeus-python: C++, exits on SIGINT) and ``other-bash`` (bash_kernel)."""
    specs = {
        "other-xpython": ("xpython_launcher", "XPython", "python"),
        "other-bash": ("bash_kernel", "Bash", "bash"),
    }
    for name, (module, display, language) in specs.items():
        spec = {
            "argv": [sys.executable, "-m", module, "-f", "{connection_file}"],
            "display_name": display,
            "language": language,
        }
        _write(data_dir, name, spec)
    return list(specs)
