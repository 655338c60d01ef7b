"""Does a big notebook's file keep up while an agent edits it through the server extension?

A real Jupyter Server (JupyterLab with jupyter-collaboration) with nbrelay's extension serves a
notebook of ``--cells`` cells (``bench/extension.py``'s, with outputs). Through the official MCP
client an agent edits one cell ``--edits`` times, ``--gap`` seconds apart, while the file's
modification time is watched; then how long the file takes to hold the last edit. Once per
``--setting`` (Jupyter Server arguments; by default ``c.NbrelayExtension.room_save_pace`` at its
default of 2 and at 0, saves as soon as the edits pause), alternated ``--rounds`` times, each on a
fresh server.

Printed per run: how many times the file was written during the edits, how long after the last
edit it held it, and the edits' p50 and p90 (what the agent waits).

Run: ``python bench/extension_saves.py [--cells 10000] [--rounds 2]`` (about a minute a run);
``--setting=--NbrelayExtension.linear_notebook_reads=False`` (repeatable) compares other settings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.extension import make_notebook
from tests.extension.conftest import ext_client, make_server
from tests.servers import running

SETTINGS = ("--NbrelayExtension.room_save_pace=2", "--NbrelayExtension.room_save_pace=0")


async def run(setting: str, base: Path, args: argparse.Namespace) -> str:
    server = make_server(base, args=setting.split())
    server.root.mkdir(parents=True, exist_ok=True)
    path = server.root / "n.ipynb"
    path.write_bytes(make_notebook(args.cells))
    cell = args.cells // 2 + 1  # a code cell in the middle
    last_source = f"edited = {args.edits - 1}"
    with running(server):
        async with ext_client(server) as client:
            await client.call_tool("read_notebook", {"path": "n.ipynb"})
            await anyio.sleep(5)  # the room loaded and settled
            writes = 0
            last = path.stat().st_mtime_ns
            watching = True

            async def watch() -> None:
                nonlocal writes, last
                while watching:
                    mtime = path.stat().st_mtime_ns
                    if mtime != last:
                        writes, last = writes + 1, mtime
                    await anyio.sleep(0.05)

            waits: list[float] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                began = time.monotonic()
                for k in range(args.edits):
                    started = time.perf_counter()
                    result = await client.call_tool(
                        "edit_cell", {"path": "n.ipynb", "cell": cell, "source": f"edited = {k}"}
                    )
                    if result.is_error:
                        raise RuntimeError(f"edit {k} failed: {result.content}")
                    waits.append(time.perf_counter() - started)
                    await anyio.sleep(args.gap)
                ended = time.monotonic()
                while last_source not in path.read_text(encoding="utf-8"):
                    if time.monotonic() - ended > args.limit:
                        break
                    await anyio.sleep(0.1)
                behind = time.monotonic() - ended
                watching = False
    waits.sort()
    p90 = waits[int(0.9 * (len(waits) - 1))]
    on_disk = f"{behind:.1f} s" if behind <= args.limit else f"not within {args.limit:g} s"
    return (
        f"| {setting} | {writes} in {ended - began:.0f} s | {on_disk} | "
        f"{statistics.median(waits) * 1000:.0f} ms | {p90 * 1000:.0f} ms |"
    )


async def main(args: argparse.Namespace) -> int:
    print(
        f"{args.cells} cells, {args.edits} edits {args.gap:g} s apart through the extension\n\n"
        "| setting | file written | last edit on disk after | edit p50 | edit p90 |\n"
        "|---|---|---|---|---|",
        flush=True,
    )
    for _ in range(args.rounds):
        for setting in args.setting or SETTINGS:
            with tempfile.TemporaryDirectory(prefix="nbrelay-bench-saves-") as tmp:
                print(await run(setting, Path(tmp), args), flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=10_000, help="Cells in the notebook.")
    parser.add_argument("--edits", type=int, default=40, help="Edits per run.")
    parser.add_argument("--gap", type=float, default=0.7, help="Seconds between two edits.")
    parser.add_argument("--rounds", type=int, default=2, help="Runs of each setting.")
    parser.add_argument(
        "--setting",
        action="append",
        help="Jupyter Server arguments of one setting (repeat to compare; default: "
        + " vs ".join(SETTINGS)
        + ").",
    )
    parser.add_argument(
        "--limit", type=float, default=60.0, help="Seconds to wait for the last edit on disk."
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
