"""Every error a profile gives names only that profile's tools and parameters, and numbers cells
as that profile does (ipynb-mcp from 1, the others from 0).

Every tool of every profile is driven with inputs that cause the errors an agent meets (a cell
index out of range, an unknown cell id, a missing notebook, a path that exists, a stale
version, a bad path, the wrong value for each parameter), and every error text is checked: the
tool errors, and ipynb-mcp's ``error`` fields. Tools and parameters come from ``tools/list``,
so a tool added later is covered too.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbrelay.notebook.model import new_cell, new_notebook
from nbrelay.server import PROFILES
from tests.helpers import notebook, write_notebook
from tests.security.surface import Tool, connect, discover, filler, refused

pytestmark = pytest.mark.anyio

BAD_PATHS = ("missing.ipynb", "../outside.ipynb", "exists.ipynb", "folder/deeper/new.ipynb")
BAD_INTS = (99, -99, 0, 1)
BAD_STRINGS = ("zzzz", "99", "99:120", "")
NOTEBOOKS = ("ok.ipynb", "exists.ipynb", "notebook.ipynb")


def _names(schema: Any) -> Iterator[str]:
    """Every property name in a JSON schema, nested ones included."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                yield from value
            yield from _names(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _names(item)


def _prepare(root: Path) -> None:
    for name in NOTEBOOKS:
        nb = notebook("a = 1", "print(a)", "a + 1")
        nb.cells.append(new_cell("markdown", "# notes", "m0"))
        write_notebook(root / name, nb)
    write_notebook(root / "empty.ipynb", new_notebook())


def _variants(tool: Tool) -> Iterator[dict[str, Any]]:
    """Argument sets that reach the tool's errors: valid baseline, then one bad value at a time
    (and with every optional parameter given a plain value)."""
    base: dict[str, Any] = {}
    for name, prop in tool.properties.items():
        if name in tool.path_params:
            base[name] = "ok.ipynb"
        elif name in tool.required:
            base[name] = filler(name, prop)
    yield base
    for name, prop in tool.properties.items():
        if name in tool.path_params:
            for bad in BAD_PATHS:
                yield {**base, name: bad}
            continue
        kinds = json.dumps(prop)
        if '"integer"' in kinds:
            for number in BAD_INTS:
                yield {**base, name: number}
        if '"string"' in kinds and "enum" not in prop:
            for text in BAD_STRINGS:
                yield {**base, name: text}
        if '"array"' in kinds:
            yield {**base, name: [99]}
            yield {**base, name: ["zzzz"]}
            yield {**base, name: [{"start": 99}]}
        if "enum" in prop:
            for choice in prop["enum"]:
                yield {**base, name: choice}
        if '"boolean"' in kinds:
            yield {**base, name: True}
    yield {**base, **{n: "0123456789abcdef" for n in tool.properties if "version" in n}}


def _error_texts(result: Any) -> list[str]:
    texts = [b.text for b in result.content if getattr(b, "type", "") == "text" and result.is_error]
    data = result.structured_content
    if isinstance(data, dict) and refused(result):
        texts += [data[k] for k in ("error", "message") if isinstance(data.get(k), str) and data[k]]
    return texts


@pytest.fixture(scope="module")
def surface(tmp_path_factory: pytest.TempPathFactory) -> list[Tool]:
    import anyio

    root = tmp_path_factory.mktemp("surface")
    return anyio.run(discover, root, root / "locks")


def _enums(schema: Any) -> Iterator[str]:
    """Every enum value in a JSON schema, and every identifier its descriptions name: a
    profile's own words (its execution types, query types, ...)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "enum" and isinstance(value, list):
                yield from (v for v in value if isinstance(v, str))
            if key == "description" and isinstance(value, str):
                yield from re.findall(r"\b[a-z]+_[a-z0-9_]+\b", value)
            yield from _enums(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _enums(item)


ONE_BASED_WRONG = ("0-based", "zero-based", "indexes 0-", "-1 is the last")
ZERO_BASED_WRONG = ("1-based",)


# Pydantic's account of an error (``[type=int_parsing, input_value=…, input_type=str]``), which a
# profile whose original words bad arguments as pydantic does repeats: its words, no parameter's.
_PYDANTIC_DETAIL = re.compile(r"\[type=\w+, input_value=.*?, input_type=\w+\]")


def _wrong_words(text: str, foreign: tuple[set[str], set[str]], params: set[str]) -> list[str]:
    """The tools and parameters of other profiles that ``text`` names."""
    tools, parameters = foreign
    text = _PYDANTIC_DETAIL.sub("", text)
    found = [
        f"names the tool {w!r} of another profile"
        for w in re.findall(r"\w+", text)
        if w in tools and "_" in w
    ]
    # Tools named by one plain word (execute, undo) count when written as a call: "(execute)".
    found += [
        f"names the tool {w!r} of another profile"
        for pair in re.findall(r"\(([a-z]+)\)|\b([a-z]+)\(", text)
        for w in pair
        if w in tools
    ]
    found += [
        f"names the parameter {w!r} it lacks"
        for w in re.findall(r"\b([a-z][a-z0-9_]*)=", text)
        + re.findall(r"\b[a-z]+_[a-z0-9_]+\b", text)
        if w in parameters and w not in params
    ]
    return found


def _vocabulary(tools: list[Tool]) -> tuple[set[str], set[str]]:
    names = {n for t in tools for n in _names(t.schema)} | {
        e for t in tools for e in _enums(t.schema)
    }
    return {t.name for t in tools}, names


@pytest.mark.parametrize("profile", PROFILES)
async def test_errors_name_only_the_profiles_own_tools_and_index_base(
    profile: str, surface: list[Tool], root: Path, tmp_path: Path
) -> None:
    all_tools, all_params = _vocabulary(surface)
    mine = [t for t in surface if t.profile == profile]
    tools, params = _vocabulary(mine)
    foreign = (all_tools - tools - params, all_params - params - tools)
    one_based = profile == "ipynb-mcp"
    _prepare(root)
    problems: list[str] = []
    seen = 0
    async with connect(
        profile, root, tmp_path / "locks", mode="auto", execution_timeout=20, kernel_pool=0
    ) as client:
        for tool, args in itertools.chain.from_iterable(
            ((t, a) for a in _variants(t)) for t in mine
        ):
            for name in NOTEBOOKS:  # each call starts from the same notebooks
                if not (root / name).exists():
                    _prepare(root)
                    break
            result = await client.call_tool(tool.name, args)
            for text in _error_texts(result):
                seen += 1
                where = f"{tool.name}({json.dumps(args)}): {text}"
                problems += [f"{p}: {where}" for p in _wrong_words(text, foreign, params)]
                if one_based and args.get("cell_index") == 99 and re.search(r"\b98\b", text):
                    problems.append(f"shows a 0-based index: {where}")
                problems += [
                    f"says {w!r} where cells are numbered from {1 if one_based else 0}: {where}"
                    for w in (ONE_BASED_WRONG if one_based else ZERO_BASED_WRONG)
                    if w in text.lower()
                ]
    assert seen > len(mine), f"only {seen} errors were reached"
    assert not problems, "\n".join(sorted(set(problems))[:40])


# Resource reads that fail: a missing notebook, cells and outputs that are not there, a bad path.
BAD_RESOURCES = (
    "nbrelay://notebook/missing.ipynb",
    "nbrelay://notebook/missing.ipynb/cells/0",
    "nbrelay://notebook/../outside.ipynb",
    "nbrelay://notebook/ok.ipynb/cells/99",
    "nbrelay://notebook/ok.ipynb/cells/zzzz",
    "nbrelay://notebook/ok.ipynb/cells/0/outputs/5",
    "nbrelay://notebook/ok.ipynb/cells/0/outputs/0.png",
    "nbrelay://notebook/missing.ipynb/history",
    "nbrelay://notebook/missing.ipynb/changes",
    "notebook://session/nosuchsession/state",
    "notebook://session/nosuchsession/history",
    "notebook://session/nosuchsession/events",
)


@pytest.mark.parametrize("profile", PROFILES)
async def test_resource_errors_name_only_the_profiles_own_tools(
    profile: str, surface: list[Tool], root: Path, tmp_path: Path
) -> None:
    from mcp.shared.exceptions import MCPError

    every_tool = {t.name for t in surface}
    _prepare(root)
    problems: list[str] = []
    seen = 0
    async with connect(profile, root, tmp_path / "locks", mode="auto", kernel_pool=0) as client:
        mine = {t.name for t in (await client.list_tools()).tools}
        templates = (await client.list_resource_templates()).resource_templates
        schemes = {t.uri_template.split("://")[0] for t in templates}
        for uri in BAD_RESOURCES:
            if uri.split("://")[0] not in schemes:
                continue
            with pytest.raises(MCPError) as failed:
                await client.read_resource(uri)
            text = failed.value.error.message
            seen += 1
            assert "internal error" not in text, f"{uri}: {text}"
            if uri.endswith("/cells/99"):  # resource URIs number cells from 0 in every profile
                assert "index 99 " in text, text
                assert "1-based" not in text, text
            named = {w for w in re.findall(r"\w+", text) if w in every_tool and "_" in w}
            named |= {
                w for pair in re.findall(r"\(([a-z]+)\)|\b([a-z]+)\(", text) for w in pair
            } & every_tool
            problems += [
                f"{uri} names {w!r}, not a tool of {profile}: {text}" for w in named - mine
            ]
    assert seen >= 9
    assert not problems, "\n".join(problems)
