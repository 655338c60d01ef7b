"""Fuzzing (plan F1, F3): schema-driven arguments for every tool of every profile, and mutated
notebook files. 0 crashes (no masked internal error, no JSON-RPC error), invalid arguments
refused, and every file under the root byte-identical after any call that failed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from nbrelay.config import Settings
from nbrelay.notebook.model import new_cell, new_notebook, serialize
from nbrelay.server import PROFILES, build_server
from tests.helpers import draw
from tests.http.harness import report, size, tree_digest
from tests.security.strategies import arguments, invalid_arguments
from tests.security.surface import connect, everything_said, is_path_param, refused

EXAMPLES = size(int(os.environ.get("NBRELAY_FUZZ_EXAMPLES", "200")), 2000)
CRASH_MARKS = ("internal error in nbrelay", "Traceback (most recent call last)")
CALL_LIMIT = 20.0  # seconds a call on a damaged file may take (generous: a busy machine passes)

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


def corpus_notebook() -> bytes:
    code = new_cell("code", "import math\nprint(math.pi)", "c1")
    code["execution_count"] = 1
    code["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "3.14159\n"},
        {
            "output_type": "display_data",
            "data": {"image/png": PNG, "text/plain": "<Figure>"},
            "metadata": {},
        },
        {
            "output_type": "error",
            "ename": "ValueError",
            "evalue": "bad",
            "traceback": ["\x1b[31mValueError\x1b[0m: bad"],
        },
    ]
    cells = [
        new_cell("markdown", "# Title\nSome *text*.", "m0"),
        code,
        new_cell("raw", "raw text", "r2"),
        new_cell("code", "x = 1\ny = x + 1\nz = y * 2", "c3"),
    ]
    return serialize(new_notebook(cells))


def fill(root: Path) -> None:
    """The fuzzing corpus: a few notebooks, a folder, a non-notebook file."""
    if root.exists():
        shutil.rmtree(root)
    (root / "sub").mkdir(parents=True)
    (root / "a.ipynb").write_bytes(corpus_notebook())
    (root / "b.ipynb").write_bytes(serialize(new_notebook([new_cell("code", "", "e0")])))
    (root / "sub" / "c.ipynb").write_bytes(corpus_notebook())
    (root / "notes.txt").write_text("plain text\n")


KNOWN_PATHS = ["a.ipynb", "b.ipynb", "sub/c.ipynb", "missing.ipynb", "sub", "", "notes.txt"]


async def fuzz_tool(
    tool: Any,
    client: Client,
    safe: Client | None,
    root: Path,
    runs_code: bool,
    tally: Counter[str],
) -> list[str]:
    """Valid arguments (unless the tool runs code), then mutated ones, against one tool.

    Returns the failures: a crash, a failed call that changed a file, or a certainly-invalid
    argument set that was accepted. Arguments that may be accepted go to ``safe``, the same
    profile started with --no-execute, so fuzzing never starts kernels (the kernel suites run
    code); certainly-invalid ones go to ``client``, which refuses them before any code could run.
    """
    schema = dict(tool.input_schema)
    props = schema.get("properties") or {}
    paths = {n: KNOWN_PATHS for n, p in props.items() if is_path_param(n, p)}
    valid = arguments(schema, paths=paths)
    cases: list[tuple[dict[str, Any], str]] = []
    if not runs_code:
        cases += [(args, "valid") for args in draw(valid, EXAMPLES)]
    for args, certain in draw(invalid_arguments(schema, valid), EXAMPLES):
        if certain:
            cases.append((args, "certainly invalid"))
        elif not runs_code:  # might run code: only certainly-invalid arguments go to such tools
            cases.append((args, "odd"))
    fill(root)
    failures: list[str] = []
    for args, label in cases:
        before = tree_digest(root)
        with anyio.fail_after(120):
            target = client if label == "certainly invalid" or safe is None else safe
            result = await target.call_tool(tool.name, args)
        said = everything_said(result)
        where = f"{tool.name}({str(args)[:200]})"
        if any(m in said for m in CRASH_MARKS):
            failures.append(f"{where} crashed: {said[:300]}")
        failed = refused(result)
        if failed and tree_digest(root) != before:
            failures.append(f"{where} failed but changed files")
        if label == "certainly invalid" and not failed:
            failures.append(f"{where} accepted certainly invalid arguments")
        tally[f"{label} {'refused' if failed else 'applied'}"] += 1
    return failures


@pytest.mark.anyio
@pytest.mark.parametrize("profile", PROFILES)
async def test_schema_driven_arguments_never_crash_or_change_files_on_failure(
    profile: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root, locks = tmp_path / "root", tmp_path / "locks"
    fill(root)
    tally: Counter[str] = Counter()
    failures: list[str] = []
    async with (
        connect(profile, root, locks, mode="auto") as client,
        connect(profile, root, locks, mode="auto", no_execute=True) as safe,
    ):
        tools = (await client.list_tools()).tools
        safe_tools = {t.name: t for t in (await safe.list_tools()).tools}
        for tool in tools:
            runs_code = tool.name not in safe_tools
            # A tool that exists in both is fuzzed in its --no-execute form for accepted input.
            shape = safe_tools.get(tool.name, tool)
            failures += await fuzz_tool(
                shape, client, None if runs_code else safe, root, runs_code, tally
            )
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:20])
    calls = sum(tally.values())
    report(
        request,
        f"F1 {profile}: {len(tools)} tools x up to {EXAMPLES} valid + {EXAMPLES} mutated argument "
        f"sets ({len(tools) - len(safe_tools)} tools that run code get certainly-invalid ones "
        f"only) = {calls} "
        f"calls: valid {tally['valid applied']} applied / {tally['valid refused']} refused, "
        f"certainly invalid {tally['certainly invalid refused']} refused / "
        f"{tally['certainly invalid applied']} accepted, odd values "
        f"{tally['odd applied']} accepted / {tally['odd refused']} refused; 0 crashes, 0 files "
        "changed by a failed call",
    )


# -- F3: mutated notebook files ------------------------------------------------------------------


def _deep(levels: int) -> bytes:
    """A notebook whose metadata nests ``levels`` arrays deep (built as text: Python's own json
    module cannot build it either)."""
    nb = json.loads(corpus_notebook())
    nb["metadata"]["deep"] = "DEEP"
    return json.dumps(nb).replace('"DEEP"', "[" * levels + "]" * levels).encode()


def mutations(rng: random.Random, base: bytes, count: int) -> Iterator[tuple[str, bytes]]:
    """Byte flips, truncations and structural damage of a good notebook."""
    good = json.loads(base)
    structural: list[tuple[str, Any]] = [
        ("no cells", {k: v for k, v in good.items() if k != "cells"}),
        ("cells not a list", {**good, "cells": {"a": 1}}),
        ("nbformat 3", {**good, "nbformat": 3}),
        ("nbformat 5", {**good, "nbformat": 5}),
        ("nbformat a string", {**good, "nbformat": "4"}),
        ("top level a list", [good]),
        ("cell not an object", {**good, "cells": [1, "two", None]}),
        ("cell without type", {**good, "cells": [{"source": "x", "metadata": {}}]}),
        ("unknown cell type", {**good, "cells": [{**good["cells"][0], "cell_type": "weird"}]}),
        (
            "duplicate ids",
            {**good, "cells": [good["cells"][3], good["cells"][3], good["cells"][3]]},
        ),
        ("id not a string", {**good, "cells": [{**good["cells"][0], "id": 7}]}),
        ("outputs a string", {**good, "cells": [{**good["cells"][1], "outputs": "oops"}]}),
        ("source a number", {**good, "cells": [{**good["cells"][3], "source": 42}]}),
        ("metadata a list", {**good, "metadata": []}),
        ("huge string", {**good, "cells": [{**good["cells"][3], "source": "y" * 5_000_000}]}),
    ]
    out: list[tuple[str, bytes]] = [(n, json.dumps(v).encode()) for n, v in structural]
    out += [
        ("nested 600 deep", _deep(600)),
        ("nested 100000 deep", _deep(100_000)),
        ("BOM", b"\xef\xbb\xbf" + base),
        ("UTF-16", base.decode().encode("utf-16")),
        ("latin-1 byte", base.replace(b"Title", b"T\xe9tle")),
        ("empty", b""),
        ("NUL bytes", b"\x00" * 64),
    ]
    while len(out) < count:
        raw = bytearray(base)
        kind = rng.choice(["flip", "truncate", "delete", "insert"])
        at = rng.randrange(len(raw))
        if kind == "flip":
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            del raw[at:]
        elif kind == "delete":
            del raw[at : at + rng.randint(1, 40)]
        else:
            raw[at:at] = rng.choice([b"{", b"]", b'"', b",", b"\\", b"\x00", b"\xff", b"null"])
        out.append((kind, bytes(raw)))
    yield from out[:count]


READS: list[tuple[str, dict[str, Any]]] = [
    ("read_notebook", {"full": True}),
    ("read_cell", {"cell": 0}),
    ("search_notebook", {"pattern": "x", "outputs": True}),
]
WRITES: list[tuple[str, dict[str, Any]]] = [
    ("insert_cells", {"cells": ["new"]}),
    ("edit_cell", {"cell": 0, "source": "changed"}),
    ("clear_outputs", {}),
    ("delete_cells", {"cells": [0]}),
]


@pytest.mark.anyio
async def test_mutated_notebook_files_never_crash_and_are_never_modified(
    root: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(99)
    base = corpus_notebook()
    cases = size(500, 5000)
    tally: Counter[str] = Counter()
    settings_ = Settings(root=root, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings_), mode="auto") as client:
        for n, (kind, raw) in enumerate(mutations(rng, base, cases)):
            path = root / f"m{n}.ipynb"
            path.write_bytes(raw)
            readable = True
            for tool, args in READS:
                started = time.monotonic()
                with anyio.fail_after(120):
                    result = await client.call_tool(tool, {"path": path.name, **args})
                assert time.monotonic() - started < CALL_LIMIT, (kind, tool, "too slow")
                said = everything_said(result)
                assert not any(m in said for m in CRASH_MARKS), (kind, tool, said[:300])
                assert path.read_bytes() == raw, f"{kind}: {tool} changed the file"
                readable = readable and not result.is_error
            tool, args = WRITES[n % len(WRITES)]
            started = time.monotonic()
            with anyio.fail_after(120):
                result = await client.call_tool(tool, {"path": path.name, **args})
            assert time.monotonic() - started < CALL_LIMIT, (kind, tool, "too slow")
            said = everything_said(result)
            assert not any(m in said for m in CRASH_MARKS), (kind, tool, said[:300])
            if result.is_error:
                assert path.read_bytes() == raw, f"{kind}: a refused {tool} changed the file"
                tally["write refused"] += 1
            else:
                assert readable, f"{kind}: {tool} wrote a notebook that reads refused"
                tally["write applied"] += 1
            tally["readable" if readable else "unreadable"] += 1
            path.unlink()
    report(
        request,
        f"F3: {cases} mutated notebook files (byte flips, truncations, structural damage, "
        f"nesting to 100,000, 5 MB strings, BOM, UTF-16): {tally['readable']} still readable, "
        f"{tally['unreadable']} refused with an error; writes: {tally['write applied']} applied "
        f"to valid ones, {tally['write refused']} refused with the file unchanged; 0 crashes",
    )


def test_strategies_cover_hypothesis_jsonschema_leaves() -> None:
    """The argument strategies really draw from the schemas (a smoke check on one schema)."""
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "kind": {"enum": ["a", "b"]},
        },
        "required": ["path", "n"],
    }
    seen: list[dict[str, Any]] = []

    @settings(max_examples=50, deadline=None, database=None, derandomize=True)
    @given(arguments(schema), st.data())
    def draw(args: dict[str, Any], _: Any) -> None:
        seen.append(args)

    draw()
    assert all(isinstance(a["path"], str) and 1 <= a["n"] <= 3 for a in seen)
    assert {a.get("kind") for a in seen} >= {"a", "b"}
