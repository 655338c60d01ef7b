"""What a run costs the agent that reads it: characters of result text, nbrelay against datalayer.

Ten notebook cells of everyday code (prints, values, a loop, a dict, an error) are run one call
each, over stdio with the official MCP client, by nbrelay (file mode, ``execute``) and by
datalayer jupyter-mcp-server 2.2.4 (``execute_cell`` on the same notebook in a JupyterLab the
benchmark starts on 127.0.0.1, as ``bench/compare.py`` does). The figure is the characters of
the text content of each result: what a model reads. With ``--before PATH`` (a checkout of
nbrelay's source, e.g. the main branch) that nbrelay is measured too, in the same run.

Run: ``python bench/run_text.py [--dl VENV] [--before /path/to/checkout/src]`` (prints a table;
not part of the test run). ``--dl`` defaults to ``bench/compare.py``'s cached environment.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import call, connect, ensure_venv, jupyter_server, result_text
from nbrelay.notebook.model import new_cell, new_notebook, serialize

NAME = "runs.ipynb"
CODE = [
    "import math\nprint(math.pi)",
    "sum(range(100))",
    "data = [3, 1, 4, 1, 5, 9, 2, 6]\nsorted(data)",
    "for i in range(5):\n    print(i, i * i)",
    '{"mean": sum(data) / len(data), "max": max(data)}',
    "1 / 0",
    'print("done")',
    "x = 41\nx + 1",
    '"-".join(["a", "b", "c"])',
    'import json\nprint(json.dumps({"a": [1, 2]}))',
]


def notebook() -> bytes:
    # Ids as JupyterLab makes them (8 hex digits): the text names each cell by its id.
    cells = [new_cell("code", c, secrets.token_hex(4)) for c in CODE]
    return serialize(new_notebook(cells))


async def nbrelay_texts(root: Path, src: str | None = None) -> list[str]:
    env = {**os.environ, "PYTHONPATH": src} if src else None
    args = ["-m", "nbrelay", "serve", "--root", str(root), "--lock-dir", str(root / ".locks")]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with connect(params) as (client, _):
        out = []
        for i in range(len(CODE)):
            result = await call(client, "execute", {"path": NAME, "cells": [i]})
            out.append(result_text(result))
        return out


async def dl_texts(venv: Path, url: str, token: str) -> list[str]:
    exe = str(venv / "bin" / "jupyter-mcp-server")
    args = ["start", "--transport", "stdio", "--jupyter-url", url, "--jupyter-token", token]
    async with connect(StdioServerParameters(command=exe, args=args)) as (client, _):
        nb = {"notebook_name": "runs"}
        await call(client, "use_notebook", {**nb, "notebook_path": NAME, "mode": "connect"})
        return [
            result_text(await call(client, "execute_cell", {"cell_index": i}))
            for i in range(len(CODE))
        ]


async def main(args: argparse.Namespace) -> int:
    raw = notebook()
    venv = args.dl or ensure_venv(args.cache, "dl")
    rows: list[tuple[str, list[str]]] = []
    with tempfile.TemporaryDirectory(prefix="nbrelay-runtext-") as tmp:
        for key in ("dl", "before", "nbrelay"):
            if key == "before" and not args.before:
                continue
            root = Path(tmp) / key
            root.mkdir()
            (root / NAME).write_bytes(raw)
            if key == "dl":
                with jupyter_server(root) as (url, token, _pid):
                    rows.append(
                        ("datalayer jupyter-mcp-server 2.2.4", await dl_texts(venv, url, token))
                    )
            elif key == "before":
                rows.append((f"nbrelay ({args.before})", await nbrelay_texts(root, args.before)))
            else:
                rows.append(("nbrelay", await nbrelay_texts(root)))
    base = sum(len(t) for t in rows[0][1])
    print(f"\nCharacters of result text, {len(CODE)} runs of the same cells, one call each\n")
    print("| server | total | per run | × datalayer |")
    print("|---|---|---|---|")
    for title, texts in rows:
        total = sum(len(t) for t in texts)
        print(f"| {title} | {total:,} | {total / len(texts):.0f} | {total / base:.2f} |")
    if args.show:
        for title, texts in rows:
            print(f"\n## {title}\n")
            for t in texts:
                print(t, "\n---")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dl", type=Path, help="datalayer jupyter-mcp-server's virtual environment")
    p.add_argument("--before", help="another nbrelay source folder to measure (its src/)")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "nbrelay-bench")
    p.add_argument("--show", action="store_true", help="print every result text")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
