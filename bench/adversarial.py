"""Zero lost work under adversity: a randomized run with a fixed seed, as long as one likes.

Several agents (MCP sessions and a sessionless client, all the official MCP client over
streamable HTTP) and several people (pycrdt clients in the notebooks' rooms, typing, moving and
deleting cells; in file mode a writer outside nbrelay rewriting the files instead) work on the
same notebooks while what serves them is stopped with SIGTERM or killed with SIGKILL and
restarted, and (live and extension modes) the files are rewritten from outside so that Jupyter
reloads the rooms. Every change writes a unique token; at the end, after the saves, the files are
read with nbformat and the lost edits, duplicated cells, edits in the wrong cell or notebook, lost
keystrokes and silent overwrites are counted (``tests/reliability/adversarial.py`` defines each
precisely). Target: 0 each.

Run: ``python bench/adversarial.py --seed 7 --rounds 20 --mode live`` (``--mode all`` runs the
three modes one after another; ``--browser`` adds a person in headless Chromium in live and
extension modes). The brief version of this run is ``tests/reliability/test_adversarial.py``.
Exits 1 when any count is not 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reliability.adversarial import MODES, Figures, Run, log_to_stderr


async def one(mode: str, args: argparse.Namespace) -> Figures:
    with tempfile.TemporaryDirectory(prefix=f"nbrelay-adversarial-{mode}-") as base:
        run = Run(
            mode,
            args.seed,
            Path(base),
            agents=args.agents,
            people=args.people,
            notebooks=args.notebooks,
            ops=args.ops,
            browser=args.browser,
            log=log_to_stderr if args.verbose else lambda _: None,
        )
        return await run.run(args.rounds, args.dump)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--mode", choices=[*MODES, "all"], default="all")
    parser.add_argument("--agents", type=int, default=3, help="the last one is sessionless")
    parser.add_argument("--people", type=int, default=2)
    parser.add_argument("--notebooks", type=int, default=2)
    parser.add_argument("--ops", type=int, default=6, help="operations per agent per round")
    parser.add_argument("--browser", action="store_true", help="a person in headless Chromium")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--dump", type=Path, help="write the ledger and the files here (JSON)")
    args = parser.parse_args()
    failed = False
    for mode in MODES if args.mode == "all" else (args.mode,):
        figures = anyio.run(one, mode, args)
        print(figures.line())
        for line in figures.details:
            print("  " + line)
        failed = failed or any(figures.counts().values())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
