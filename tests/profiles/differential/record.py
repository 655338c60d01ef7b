"""Record an original server's answers to a profile's sequence, as a golden transcript.

Usage (the originals live outside this repository; their code is never committed here)::

    python -m tests.profiles.differential.record ipynb-mcp PATH
    python -m tests.profiles.differential.record notebook-lr PATH
    python -m tests.profiles.differential.record jupyterlab-rtc PATH

``PATH`` is a checkout of the original prepared as its README says (the commits are in each
sequence module's ``ORIGINAL``):

* ipynb-mcp: ``git archive`` of Minhao-Zhang/ipynb-mcp, then ``uv sync --frozen`` (Python 3.12;
  its uv.lock pins fastmcp 2.5.2, mcp 1.9.2, nbformat 5.10.4). Run as ``.venv/bin/python main.py``
  with the fixture root as its working folder.
* notebook-lr: tmdgusya/notebook-lr at 568a927 (the commit that added the 9 tools), then
  ``uv sync --frozen`` (its uv.lock pins mcp 1.26.0). Run as ``.venv/bin/python -m
  notebook_lr.mcp_server`` in the fixture root.
* jupyterlab-rtc: complyue/jupyterlab-rtc-mcp at bac78b9 (the commit whose DESIGN.md is the seed),
  then ``npm ci && npx tsc``. Run as ``node dist/index.js`` with ``JUPYTERLAB_URL`` and
  ``JUPYTERLAB_TOKEN`` naming a JupyterLab (jupyter-collaboration) that this script starts on
  127.0.0.1 over the fixture root, from this Python (the suite's own versions).

The transcript keeps each call and its masked outcome (``harness.outcome``), the original's
tools/list, and for file-based originals the files the sequence left (ids and times masked).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests.profiles.differential import sequences
from tests.profiles.differential.harness import Transcript, play, transcript_steps

TOP = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def jupyterlab(root: Path, work: Path) -> Iterator[Any]:
    from tests.live.server import JupyterServer
    from tests.servers import free_port, running

    with running(JupyterServer(root=root, work=work, port=free_port())) as server:
        yield server


def _params(profile: str, original: Path, root: Path, jupyter: Any) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "VIRTUAL_ENV"))}
    if profile == "ipynb-mcp":
        return StdioServerParameters(
            command=str(original / ".venv/bin/python"),
            args=[str(original / "main.py")],
            cwd=str(root),
            env=env,
        )
    if profile == "notebook-lr":
        return StdioServerParameters(
            command=str(original / ".venv/bin/python"),
            args=["-m", "notebook_lr.mcp_server"],
            cwd=str(root),
            # Its SessionManager writes under ~/.notebook_lr: a home of its own, in the fixture.
            env={**env, "PYTHONPATH": str(original), "HOME": str(root.parent / "home")},
        )
    if profile == "jupyterlab-rtc":
        # Node 22 (the suite's, in .tools): its global WebSocket is what the original's
        # y-websocket provider needs; the URL as its README writes it, without a final slash.
        node = TOP / ".tools/node_modules/.bin/node"
        return StdioServerParameters(
            command=str(node) if node.exists() else "node",
            args=[str(original / "dist/index.js")],
            cwd=str(root),
            env={
                **env,
                "JUPYTERLAB_URL": jupyter.url.rstrip("/"),
                "JUPYTERLAB_TOKEN": jupyter.token,
            },
        )
    raise SystemExit(f"no recipe for {profile}")


@contextlib.asynccontextmanager
async def original_client(params: StdioServerParameters) -> AsyncIterator[Client]:
    async with Client(params, mode="legacy", read_timeout_seconds=180) as client:
        yield client


async def record(profile: str, original: Path) -> Transcript:
    seq = sequences.get(profile)
    with tempfile.TemporaryDirectory(prefix=f"record-{profile}-") as tmp:
        folder = Path(tmp)
        root = seq.make_fixtures(folder)
        mask = seq.MASK.with_roots(root, folder)
        live = seq.LIVE
        with jupyterlab(root, folder / "work") if live else contextlib.nullcontext() as jupyter:
            async with original_client(_params(profile, original, root, jupyter)) as client:
                tools = [
                    t.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for t in (await client.list_tools()).tools
                ]
                outcomes = await play(client, seq.STEPS, mask)
            files = seq.files_after(root, mask) if hasattr(seq, "files_after") else {}
    return Transcript(
        profile=profile,
        original=seq.ORIGINAL,
        recorded_with=f"python -m tests.profiles.differential.record {profile} <checkout>",
        steps=transcript_steps(seq.STEPS, outcomes),
        tools=tools,
        files=files,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", choices=sequences.RECORDED)
    parser.add_argument("original", type=Path, help="the original's prepared checkout")
    args = parser.parse_args(argv)
    transcript = anyio.run(record, args.profile, args.original.resolve())
    transcript.save()
    steps = transcript.steps
    errors = sum(s["outcome"]["error"] for s in steps)
    sys.stderr.write(f"{transcript.path}: {len(steps)} steps, {errors} error results\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
