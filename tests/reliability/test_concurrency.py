"""Concurrency (plan B): many clients and two processes on one notebook, 0 lost edits.

Each client works on its own cells (tagged ``client-N``), addressed by id, through a real
``nbrelay serve --http`` on a real socket, and keeps a model of what its cells should be. Every
operation is either applied (the model follows) or refused with an error (the model stays). At
the end the notebook on disk must hold exactly the union of the models: nothing lost, nothing
duplicated, every id unique, a valid notebook.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from mcp import Client

from nbrelay.notebook.model import parse
from tests.helpers import call, call_error, data_of, notebook, text_of, write_notebook
from tests.http.harness import RunningServer, http_client, http_server, report, size

pytestmark = pytest.mark.anyio

CLIENTS = size(8, 32)
OPS = size(100, 1000)
SEEDS = range(size(1, 10))
NB = "shared.ipynb"


@dataclass
class Tally:
    applied: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)


async def run_client(
    client: Client, n: int, seed: int, model: dict[str, str], tally: Tally
) -> None:
    rng = random.Random(seed * 1000 + n)
    tag = f"client-{n}"
    for k in range(OPS):
        mine = sorted(model)
        roll = rng.random()
        args: dict[str, Any]
        if not mine or roll < 0.4:
            op, args = (
                "insert",
                {"cells": [{"source": f"{tag} cell {k}", "metadata": {"tags": [tag]}}]},
            )
            tool = "insert_cells"
        else:
            cid = rng.choice(mine)
            if roll < 0.65:
                op, tool, args = "edit", "edit_cell", {"cell": cid, "source": f"{tag} edit {k}"}
            elif roll < 0.85:
                op, tool = "append", "edit_cell"
                args = {"cell": cid, "find": model[cid], "replace": f"{model[cid]}\n+{k}"}
            else:
                op, tool, args = "delete", "delete_cells", {"cells": [cid]}
        result = await client.call_tool(tool, {"path": NB, **args})
        if result.is_error:
            tally.refused += 1
            tally.errors.append(f"{tag} {op}: {text_of(result)[:200]}")
            continue
        data = data_of(result)
        tally.applied += 1
        if op == "insert":
            model[data["changed"][0]["id"]] = f"{tag} cell {k}"
        elif op == "edit":
            model[args["cell"]] = str(args["source"])
        elif op == "append":
            model[args["cell"]] = str(args["replace"])
        else:
            del model[args["cells"][0]]


def check_disk(path: Path, models: list[dict[str, str]]) -> int:
    raw = path.read_text(encoding="utf-8")
    nbformat.validate(nbformat.reads(raw, as_version=4))
    cells = parse(raw.encode()).cells
    ids = [c["id"] for c in cells]
    assert len(ids) == len(set(ids)), "duplicated cell ids"
    untagged = [c for c in cells if not c["metadata"].get("tags")]
    assert [c["source"] for c in untagged] == ["# shared notebook"]
    for n, model in enumerate(models):
        tag = f"client-{n}"
        on_disk = {c["id"]: c["source"] for c in cells if c["metadata"].get("tags") == [tag]}
        lost = sorted(set(model) - set(on_disk))
        extra = sorted(set(on_disk) - set(model))
        assert not lost, f"{tag}: {len(lost)} acknowledged cells lost"
        assert not extra, f"{tag}: {len(extra)} cells on disk that no acknowledged edit made"
        wrong = [cid for cid in model if model[cid] != on_disk[cid]]
        assert not wrong, f"{tag}: {len(wrong)} cells lost an acknowledged edit"
    assert len(cells) == 1 + sum(len(m) for m in models)
    return len(cells)


@pytest.fixture
def servers(
    request: pytest.FixtureRequest, root: Path, tmp_path: Path
) -> Iterator[list[RunningServer]]:
    processes: int = request.param
    write_notebook(root / NB, notebook())
    nb = parse((root / NB).read_bytes())
    nb.cells.append(
        {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": "# shared notebook"}
    )
    from nbrelay.notebook.model import serialize

    (root / NB).write_bytes(serialize(nb))
    locks = tmp_path / "locks"
    with ExitStack() as stack:
        yield [
            stack.enter_context(http_server(root, tmp_path, "--lock-dir", str(locks), name=f"p{i}"))
            for i in range(processes)
        ]


@pytest.mark.parametrize("servers", [1, 2], indirect=True, ids=["one-process", "two-processes"])
@pytest.mark.parametrize("seed", SEEDS)
async def test_many_clients_lose_no_edit_and_duplicate_no_cell(
    servers: list[RunningServer], root: Path, seed: int, request: pytest.FixtureRequest
) -> None:
    models: list[dict[str, str]] = [{} for _ in range(CLIENTS)]
    tallies = [Tally() for _ in range(CLIENTS)]

    async def one(n: int) -> None:
        server = servers[n % len(servers)]
        async with http_client(server.url, server.token) as client:
            await run_client(client, n, seed, models[n], tallies[n])

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for n in range(CLIENTS):
                tg.start_soon(one, n)
    cells = check_disk(root / NB, models)
    applied = sum(t.applied for t in tallies)
    refused = sum(t.refused for t in tallies)
    assert applied + refused == CLIENTS * OPS
    # Id-addressed edits of one's own cells never conflict: a refusal here would be a bug.
    assert refused == 0, [e for t in tallies for e in t.errors][:5]
    report(
        request,
        f"B{1 if len(servers) == 1 else 2} seed {seed}: {len(servers)} process(es), {CLIENTS} "
        f"HTTP clients x {OPS} ops: {applied} applied, {refused} refused; {cells} cells on disk; "
        "0 lost edits, 0 duplicated cells",
    )


async def test_index_edits_after_someone_inserts_above_are_refused_not_misapplied(
    root: Path, tmp_path: Path
) -> None:
    """B3: an index read before another client inserted above must not hit the wrong cell.

    Each MCP session is judged on its own reads ("changed since *you* last read it"), so the
    agent's stale index is refused even though the change came through the same server. (A
    sessionless 2026-07-28 client cannot be told apart from others; expected_version guards it,
    which the second refusal below shows.)
    """
    write_notebook(root / "idx.ipynb", notebook("target", "other"))
    with http_server(root, tmp_path) as server:
        async with (
            http_client(server.url, server.token, mode="legacy") as agent,
            http_client(server.url, server.token) as other,
        ):
            rounds = size(20, 200)
            for round_ in range(rounds):
                view = await call(agent, "read_notebook", path="idx.ipynb")
                assert view["cells"][0]["source"].startswith("target")
                above = await call(
                    other, "insert_cells", path="idx.ipynb", index=0, cells=[f"above {round_}"]
                )
                by_index = await call_error(
                    agent, "edit_cell", path="idx.ipynb", cell=0, source=f"target {round_}"
                )
                assert "changed by someone else" in by_index
                with_version = await call_error(
                    agent,
                    "edit_cell",
                    path="idx.ipynb",
                    cell=0,
                    source=f"target {round_}",
                    expected_version=view["version"],
                )
                assert "changed since version" in with_version
                # Re-reading gives the new index; the same edit then lands on the right cell.
                fresh = await call(agent, "read_notebook", path="idx.ipynb")
                # the read says what happened: someone changed it since this agent's read
                assert "changed since you last read it" in fresh["note"]
                index = [c["source"].startswith("target") for c in fresh["cells"]].index(True)
                assert index == 1
                await call(
                    agent,
                    "edit_cell",
                    path="idx.ipynb",
                    cell=index,
                    source=f"target {round_}",
                    expected_version=fresh["version"],
                )
                await call(
                    other, "delete_cells", path="idx.ipynb", cells=[above["changed"][0]["id"]]
                )
    cells = parse((root / "idx.ipynb").read_bytes()).cells
    assert [c["source"] for c in cells] == [f"target {rounds - 1}", "other"]


def test_only_indexes_and_ranges_count_as_positions() -> None:
    """An id never reads as a position (which would refuse edits after someone else's change)."""
    from nbrelay.notebook.model import random_id
    from nbrelay.workspace.notebooks import positional as _positional

    assert not any(random_id().isdigit() for _ in range(20_000))
    assert [_positional(r) for r in (3, "3", "-1", "2:5", ":3", " 4 ")] == [True] * 6
    assert [_positional(r) for r in ("a1b2c3d4", "c0", "intro", None)] == [False] * 4
