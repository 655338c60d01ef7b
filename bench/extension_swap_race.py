"""The symlink swap race (plan G1) against nbrelay inside a Jupyter Server, by profile.

``tests/security/test_paths.py`` runs this race in file mode, where every file operation goes
through descriptors opened from the root without following a symlink, and asserts that nothing
outside the root is read, deleted, created or changed. In extension mode nbrelay applies the same
path rules to every path before Jupyter sees it (``extension/contents.py``; the static attack
corpus is ``tests/security/test_extension_paths.py``) and checks what the contents manager read
against the file's own bytes, but the reads and writes themselves are Jupyter's: its contents
manager and jupyter-collaboration's rooms open files by path, following symlinks, so a folder
swapped for a link between nbrelay's check and Jupyter's use can still redirect them. This
script measures what still escapes, as figures (not a pass/fail test).

While another process exchanges a folder and a notebook of the root with symlinks to outside it
(``renameat2(RENAME_EXCHANGE)`` in a loop), every path parameter of every tool of the profile is
pointed into them, round after round, over the official MCP client.

Run: ``python bench/extension_swap_race.py [--rounds N] [profile ...]`` (a few minutes a profile;
not part of the test run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.security.surface import baseline, everything_said, refused
from tests.security.test_extension_paths import connected, serving
from tests.security.test_paths import (
    PATH_PROFILES,
    SWAP_TARGETS,
    VALID,
    _root_text,
    make_swap_layout,
    swapping_process,
)


async def race(profile: str, rounds: int, base: Path) -> str:
    """One profile's figures: what was read, deleted, created and changed outside the root."""
    lay = make_swap_layout(base / "swap")
    counts = dict.fromkeys(("calls", "answered", "refused"), 0)
    read: set[str] = set()
    deleted: set[str] = set()
    created: set[str] = set()
    changed: set[str] = set()
    with serving(lay.root, base / "server", profile) as server:
        async with connected(server, profile) as (client, mine):
            params = [(t, p) for t in mine for p in t.path_params]
            with swapping_process(lay):
                for k in range(rounds):
                    for j, (tool, param) in enumerate(params):
                        args = baseline(tool, VALID)
                        args[param] = SWAP_TARGETS[(k + j) % len(SWAP_TARGETS)].format(k=k)
                        if "packages" in args:
                            args["packages"] = ["nbrelay-no-such-package"]
                        with anyio.fail_after(120):
                            result = await client.call_tool(tool.name, args)
                        counts["calls"] += 1
                        counts["refused" if refused(result) else "answered"] += 1
                        said = everything_said(result) + _root_text(lay.root)
                        now, before = lay.outside_now(), lay.outside_tree
                        # Counted by the file outside (content or name), not by call: content
                        # copied into the root stays there, and is seen by every later call.
                        read |= {n for n, c in lay.canaries.items() if c in said}
                        deleted |= before.keys() - now.keys()
                        created |= now.keys() - before.keys()
                        changed |= {r for r in before.keys() & now.keys() if before[r] != now[r]}
                        lay.restore()
    os.close(lay.inside_fd)
    return (
        f"G1 swap race, extension mode, {profile}: {len(params)} path parameters x {rounds} "
        f"rounds = {counts['calls']} calls ({counts['answered']} answered, {counts['refused']} "
        f"refused): outside the root {len(read)} files read {sorted(read)}, {len(deleted)} "
        f"deleted {sorted(deleted)}, {len(created)} created {sorted(created)}, {len(changed)} "
        f"changed {sorted(changed)}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="*", default=PATH_PROFILES)
    parser.add_argument("--rounds", type=int, default=len(SWAP_TARGETS) * 2)
    args = parser.parse_args()
    os.environ["PIP_NO_INDEX"] = "1"  # install_packages fails fast, offline
    for profile in args.profiles:
        with tempfile.TemporaryDirectory(prefix="nbrelay-swap-") as tmp:
            print(await race(profile, args.rounds, Path(tmp)), flush=True)


if __name__ == "__main__":
    anyio.run(main)
