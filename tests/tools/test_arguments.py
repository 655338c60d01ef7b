"""Tool arguments at the registration boundary (``tools/_boundary.py``), for every tool of every
profile, found from ``tools/list``: any string reaches a string parameter unchanged, however
much it looks like JSON; one value stands for a list; a bad argument reads as an nbrelay error
naming the parameter, what it takes and an example, never as pydantic's text.

The MCP SDK json-decodes strings sent to parameters typed other than exactly ``str`` (so
``source="[1, 2, 3]"`` arrived as a list, ``pattern="null"`` as None) and words failures as
pydantic does; nbrelay takes argument handling over from it in one place. These tests go through
real MCP clients (in process with real JSON-RPC framing, and over stdio through the real CLI), so
an SDK upgrade that changes that hook shows here.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult

from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument
from nbrelay.notebook.model import new_cell, new_notebook, parse, serialize
from nbrelay.server import PROFILES, build_server, build_workspace
from nbrelay.tools._boundary import Registrar
from tests.helpers import call, draw, text_of
from tests.security.strategies import JSON
from tests.security.surface import baseline, everything_said, is_path_param

pytestmark = pytest.mark.anyio

# What agents send and the SDK used to mangle: the brief's list and the reported cases.
WIRE_STRINGS = [
    "[1]",
    "{}",
    "null",
    "true",
    "3",
    '"x"',
    "[1, 2, 3]",
    '["revenue"]',
    '{"a": 1}',
]
JSON_LOOKING = [
    *WIRE_STRINGS,
    "false",
    "-2.5",
    "1e3",
    "[]",
    " [1] ",
    "[[]]",
    '{"cells": []}',
    "",
    " ",
]
STRINGS = st.one_of(
    st.sampled_from(JSON_LOOKING),
    JSON.map(json.dumps),
    st.text(max_size=40),
)
# Pydantic's own words, which must never reach an agent of nbrelay's own words.
PYDANTIC = re.compile(r"validation error|Input should be|errors\.pydantic\.dev|\[type=\w+")
# Profiles whose original refuses a bad argument in pydantic's words (its MCP SDK's validation):
# they do too, word for word (tests/profiles/jupyter_mcp_server/test_differential.py compares).
PYDANTIC_WORDED = {"jupyter-mcp-server"}


def _resolve(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref")
    if isinstance(ref, str):
        return dict(defs[ref.rsplit("/", 1)[1]])
    return prop


def admits_string(prop: dict[str, Any], defs: dict[str, Any]) -> bool:
    """Whether a parameter's JSON schema (as tools/list gives it) admits some string."""
    prop = _resolve(prop, defs)
    kind = prop.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    if "string" in kinds or any(isinstance(v, str) for v in prop.get("enum") or ()):
        return True
    return any(admits_string(o, defs) for o in prop.get("anyOf") or prop.get("oneOf") or ())


CONSTRAINTS = ("enum", "const", "minLength", "maxLength", "pattern", "format")


def constrained(prop: dict[str, Any]) -> bool:
    """Whether a string parameter takes only some strings (an enum, a length, a pattern)."""
    return any(k in prop for k in CONSTRAINTS) or any(
        constrained(o) for o in prop.get("anyOf") or ()
    )


def string_parameters(tools: Any) -> list[tuple[Any, str, dict[str, Any]]]:
    found = []
    for tool in tools:
        schema = dict(tool.input_schema)
        defs = schema.get("$defs") or {}
        for name, prop in (schema.get("properties") or {}).items():
            if admits_string(prop, defs):
                found.append((tool, name, _resolve(prop, defs)))
    return found


def settings_for(profile: str, root: Path, **extra: Any) -> Settings:
    return Settings(
        root=root,
        profile=profile,
        lock_dir=root.parent / "locks",
        kernel_pool=0,
        execution_timeout=60,
        **extra,
    )


def corpus(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    cells = [new_cell("code", "x = 1", "c0"), new_cell("code", "x + 1", "c1")]
    (root / "a.ipynb").write_bytes(serialize(new_notebook(cells)))


# -- every string parameter ---------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
async def test_every_string_parameter_takes_any_string_unchanged(
    profile: str, tmp_path: Path
) -> None:
    """Hypothesis strings (JSON-looking ones first among them) against each string parameter's
    validation, as the tool would receive them."""
    root = tmp_path / "root"
    corpus(root)
    settings = settings_for(profile, root)
    reg = Registrar()
    PROFILES[profile](reg, build_workspace(settings))
    async with Client(build_server(settings), mode="legacy") as client:
        params = string_parameters((await client.list_tools()).tools)
    assert params, f"{profile} has no string parameter?"
    strings = JSON_LOOKING + draw(STRINGS, 300, batch=10)
    for tool, name, prop in params:
        arguments = reg.arguments[tool.name]
        for text in strings:
            try:
                got = arguments.value(name, text)
            except InvalidArgument as exc:
                refused = str(exc)
            else:
                refused = ""
            if refused:
                # only a value the parameter's own constraints rule out (not one of an enum's
                # values, too long, ...), never "not a string"
                assert constrained(prop), (profile, tool.name, name, text, refused)
                assert "(a string): " in refused, (profile, tool.name, name, text, refused)
                continue
            assert type(got) is str, (profile, tool.name, name, text, got)
            assert got == text, (profile, tool.name, name, text, got)


@pytest.mark.parametrize("profile", PROFILES)
async def test_json_looking_strings_reach_every_tool_over_json_rpc(
    profile: str, tmp_path: Path
) -> None:
    """Through a real client (legacy mode: JSON-RPC framing), every string parameter of every
    tool gets the JSON-looking strings agents send; none is refused as the wrong type.

    Tools that also exist under --no-execute are called there; the others (they run code) get
    a notebook that does not exist, so only argument handling is exercised."""
    root = tmp_path / "root"
    corpus(root)
    problems: list[str] = []
    async with (
        Client(build_server(settings_for(profile, root)), mode="legacy") as full,
        Client(build_server(settings_for(profile, root, no_execute=True)), mode="legacy") as safe,
    ):
        safe_names = {t.name for t in (await safe.list_tools()).tools}
        params = string_parameters((await full.list_tools()).tools)
        for tool, name, prop in params:
            runs_code = tool.name not in safe_names
            schema = dict(tool.input_schema)
            paths = {
                p: "missing.ipynb" if runs_code else "a.ipynb"
                for p, sub in (schema.get("properties") or {}).items()
                if is_path_param(p, sub)
            }
            args = baseline(_shape(tool), paths)
            for text in WIRE_STRINGS:
                with anyio.fail_after(120):
                    result = await (full if runs_code else safe).call_tool(
                        tool.name, {**args, name: text}
                    )
                said = everything_said(result)
                where = f"{tool.name}({name}={text!r})"
                if profile in PYDANTIC_WORDED:
                    # refused only by the parameter's own constraints, the string as a string
                    if f"\n{name}\n" in said and not (
                        constrained(prop) and "input_type=str]" in said
                    ):
                        problems.append(f"{where}: refused as the wrong type: {said[:300]}")
                elif PYDANTIC.search(said):
                    problems.append(f"{where}: pydantic text: {said[:300]}")
                if f"Invalid `{name}`" in said and not (
                    constrained(prop) and "(a string): " in said
                ):
                    problems.append(f"{where}: refused as the wrong type: {said[:300]}")
                if "internal error in nbrelay" in said:
                    problems.append(f"{where}: crashed: {said[:300]}")
    assert not problems, "\n".join(problems[:20])


class _Shape:
    """A tool as ``surface.baseline`` wants it (properties, required, path parameters)."""

    def __init__(self, tool: Any) -> None:
        schema = dict(tool.input_schema)
        self.properties: dict[str, Any] = schema.get("properties") or {}
        self.required: list[str] = list(schema.get("required") or [])
        self.path_params = [k for k, v in self.properties.items() if is_path_param(k, v)]


def _shape(tool: Any) -> Any:
    return _Shape(tool)


# -- sources are stored exactly as sent ---------------------------------------------------------

READ_BACK = WIRE_STRINGS + draw(
    st.one_of(
        st.sampled_from([s for s in JSON_LOOKING if s.strip()]),
        JSON.map(json.dumps),
        st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=40).filter(
            str.strip
        ),
    ),
    30,
    batch=10,
)


def sources(path: Path) -> list[str]:
    return [str(c["source"]) for c in parse(path.read_bytes()).cells]


@contextmanager
def fresh(root: Path, n: int) -> Iterator[str]:
    """A notebook of its own for one example (a new path, so no earlier read makes it stale)."""
    name = f"n{n}.ipynb"
    cells = [new_cell("code", "x = 1", "c0"), new_cell("code", "x + 1", "c1")]
    (root / name).write_bytes(serialize(new_notebook(cells)))
    yield name


async def test_sources_are_stored_exactly_as_sent_in_every_profile(tmp_path: Path) -> None:
    """The cell (or document) each profile's source parameter writes, read back from disk."""
    root = tmp_path / "root"
    corpus(root)

    async def check(profile: str, store: Any) -> None:
        async with Client(build_server(settings_for(profile, root)), mode="legacy") as client:
            for n, text in enumerate(READ_BACK):
                with fresh(root, n) as name:
                    got = await store(client, name, text)
                assert got == text, (profile, text, got)

    async def canonical_source(client: Client, name: str, text: str) -> str:
        await call(client, "edit_cell", path=name, cell=0, source=text)
        return sources(root / name)[0]

    async def canonical_find(client: Client, name: str, text: str) -> str:
        await call(client, "edit_cell", path=name, cell=1, source=text)
        await call(client, "edit_cell", path=name, cell=1, find=text, replace=text + "!")
        return sources(root / name)[1][:-1]

    async def canonical_insert(client: Client, name: str, text: str) -> str:
        await call(client, "insert_cells", path=name, cells=[text, {"source": text}])
        first, second = sources(root / name)[-2:]
        assert first == second
        return first

    async def canonical_create(client: Client, name: str, text: str) -> str:
        made = name.replace(".ipynb", "-made.ipynb")
        await call(client, "create_notebook", path=made, cells=[text])
        return sources(root / made)[0]

    async def ipynb_mcp(client: Client, name: str, text: str) -> str:
        await _ok(client, "edit_cell", filepath=name, cell_index=1, new_source_content=text)
        return sources(root / name)[0]

    async def notebook_lr(client: Client, name: str, text: str) -> str:
        await _ok(client, "load_notebook", path=name)
        await _ok(client, "update_cell_source", index=0, source=text)
        await _ok(client, "save_notebook", path=name)
        return sources(root / name)[0]

    async def mcp_jupyter(client: Client, name: str, text: str) -> str:
        await _ok(client, "query_notebook", notebook_path=name, query_type="view_source")
        await _ok(
            client,
            "modify_notebook_cells",
            notebook_path=name,
            operation="add_markdown",
            cell_content=text,
        )
        return sources(root / name)[-1]

    async def jupyterlab_rtc(client: Client, name: str, text: str) -> str:
        doc = name.replace(".ipynb", ".txt")
        await _ok(client, "create_document", path=doc, type="file", content=text)
        return (root / doc).read_text(encoding="utf-8")

    async def srcbook(client: Client, name: str, text: str) -> str:
        made = await _ok(client, "notebook_create", name=name.removesuffix(".ipynb"))
        added = await _ok(client, "cell_add", session_id=made["session_id"], content=text)
        for path in root.rglob("*.ipynb"):
            for cell in parse(path.read_bytes()).cells:
                if cell["id"] == added["cell_id"]:
                    return str(cell["source"])
        raise AssertionError(f"cell {added['cell_id']} is in no notebook")

    await check("canonical", canonical_source)
    await check("canonical", canonical_find)
    await check("canonical", canonical_insert)
    await check("canonical", canonical_create)
    await check("ipynb-mcp", ipynb_mcp)
    await check("notebook-lr", notebook_lr)
    await check("mcp-jupyter", mcp_jupyter)
    await check("jupyterlab-rtc", jupyterlab_rtc)
    await check("srcbook", srcbook)


async def _ok(client: Client, tool: str, **args: Any) -> Any:
    """A compatibility profile's call that must succeed (some report failure in fields)."""
    result = await client.call_tool(tool, args)
    said = everything_said(result)
    assert not result.is_error, f"{tool}: {said[:400]}"
    data = result.structured_content
    if isinstance(data, dict):
        assert data.get("success") is not False, f"{tool}: {said[:400]}"
        assert not data.get("error"), f"{tool}: {said[:400]}"
        return data.get("result", data) if set(data) == {"result"} else data
    return json.loads(text_of(result)) if text_of(result).startswith(("{", "[")) else data


# -- one value for a list -----------------------------------------------------------------------


async def test_one_value_stands_for_a_list(tmp_path: Path) -> None:
    root = tmp_path / "root"
    corpus(root)
    async with Client(build_server(settings_for("canonical", root)), mode="legacy") as client:
        await call(client, "insert_cells", path="a.ipynb", cells="y = 2")
        await call(
            client, "insert_cells", path="a.ipynb", cells={"type": "markdown", "source": "#"}
        )
        assert sources(root / "a.ipynb") == ["x = 1", "x + 1", "y = 2", "#"]
        await call(client, "delete_cells", path="a.ipynb", cells=3)
        await call(client, "delete_cells", path="a.ipynb", cells="c1")
        assert sources(root / "a.ipynb") == ["x = 1", "y = 2"]
        # JSON text for a list, as some clients send it, is the list
        await call(client, "delete_cells", path="a.ipynb", cells="[0]")
        assert sources(root / "a.ipynb") == ["y = 2"]
        await call(client, "insert_cells", path="a.ipynb", cells='["a", "b"]')
        assert sources(root / "a.ipynb") == ["y = 2", "a", "b"]
        # "all" is every cell, wherever cells are taken
        await call(client, "move_cells", path="a.ipynb", cells="2", to=0)
        await call(client, "delete_cells", path="a.ipynb", cells="all")
        assert sources(root / "a.ipynb") == []


# -- errors name the parameter, what it takes and an example ------------------------------------

WRONG = {
    "string": 12345,
    "integer": "three",
    "number": "lots",
    "boolean": "maybe",
    "array": {"not": "a list"},
    "object": [1, 2],
}


def _kinds(prop: dict[str, Any], defs: dict[str, Any]) -> set[str]:
    prop = _resolve(prop, defs)
    kind = prop.get("type")
    found = {kind} if isinstance(kind, str) else set(kind or [])
    for option in prop.get("anyOf") or ():
        found |= _kinds(option, defs)
    if "enum" in prop:
        found.add("enum")
    return found


@pytest.mark.parametrize("profile", PROFILES)
async def test_bad_arguments_read_as_nbrelay_errors(profile: str, tmp_path: Path) -> None:
    """For every parameter of every tool: a value of the wrong type, a missing required argument
    and an unknown one are refused in nbrelay's words, naming the parameter, what it takes and
    an example (in a profile whose original words them as pydantic does, in those words, still
    naming the parameter); nothing is changed on disk."""
    root = tmp_path / "root"
    corpus(root)
    before = (root / "a.ipynb").read_bytes()
    problems: list[str] = []
    async with Client(build_server(settings_for(profile, root)), mode="legacy") as client:
        for tool in (await client.list_tools()).tools:
            shape = _shape(tool)
            defs = dict(tool.input_schema).get("$defs") or {}
            args = baseline(shape, dict.fromkeys(shape.path_params, "missing.ipynb"))
            cases: list[tuple[str, dict[str, Any]]] = []
            for name, prop in shape.properties.items():
                kinds = _kinds(prop, defs)
                wrong = next(
                    (
                        v
                        for k, v in WRONG.items()
                        if k in kinds and not _fits(v, kinds | _item_kinds(prop, defs))
                    ),
                    None,
                )
                if wrong is not None:
                    cases.append((name, {**args, name: wrong}))
            cases += [(n, {k: v for k, v in args.items() if k != n}) for n in shape.required]
            cases.append(("zz_unknown", {**args, "zz_unknown": 1}))
            for name, sent in cases:
                result = await client.call_tool(tool.name, sent)
                said = text_of(result)
                where = f"{profile} {tool.name}({name})"
                if not result.is_error:
                    problems.append(f"{where}: accepted {sent}")
                    continue
                if profile in PYDANTIC_WORDED:
                    # the original's words: pydantic's, the parameter on a line of its own
                    if not re.search(rf"validation errors? for {tool.name}Arguments\n", said):
                        problems.append(f"{where}: not the original's words: {said}")
                    if not re.search(rf"\n{re.escape(name)}(\.\w+)*\n  \S.* \[type=\w+", said):
                        problems.append(f"{where}: the parameter is not named: {said}")
                    continue
                if PYDANTIC.search(said):
                    problems.append(f"{where}: pydantic text: {said}")
                if f"`{name}`" not in said:
                    problems.append(f"{where}: the parameter is not named: {said}")
                if name != "zz_unknown" and "It takes" not in said:
                    problems.append(f"{where}: does not say what it takes: {said}")
                if not re.search(r"Example: \w+\(|For example \w+=|Call it as \w+\(", said):
                    problems.append(f"{where}: no example: {said}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])
    assert (root / "a.ipynb").read_bytes() == before


def _item_kinds(prop: dict[str, Any], defs: dict[str, Any]) -> set[str]:
    """What one item of a list parameter takes (one value stands for the list)."""
    prop = _resolve(prop, defs)
    found: set[str] = set()
    for holder in [prop, *(prop.get("anyOf") or ())]:
        items = holder.get("items")
        if isinstance(items, dict):
            found |= _kinds(items, defs) | {"object"}
    return found


def _fits(value: Any, kinds: set[str]) -> bool:
    return any(
        {
            "string": isinstance(value, str),
            "integer": isinstance(value, int),
            "number": isinstance(value, int | float),
            "boolean": isinstance(value, bool),
            "array": isinstance(value, list),
            "object": isinstance(value, dict),
            "enum": False,
        }.get(k, True)
        for k in kinds
    )


async def test_messages_name_the_parameter_what_it_takes_and_an_example(tmp_path: Path) -> None:
    reg = Registrar()
    PROFILES["canonical"](reg, build_workspace(settings_for("canonical", tmp_path)))
    with pytest.raises(InvalidArgument) as info:
        reg.arguments["read_notebook"].validate({"path": "a.ipynb", "limit": 0, "strat": 1})
    assert str(info.value) == (
        "read_notebook has no argument `strat`. Did you mean `start`? It takes `path`, `start`, "
        "`limit`, `full`, `output_budget`. Invalid `limit`: 0 (an integer): should be greater "
        "than or equal to 1. It takes an integer from 1 to 500. For example limit=1. Example: "
        'read_notebook(path="eda.ipynb", start=50, full=true).'
    )
    with pytest.raises(InvalidArgument) as info:
        reg.arguments["delete_cells"].validate({"cells": [0]})
    assert str(info.value) == (
        "Missing argument `path`. It takes a string. "
        'Example: delete_cells(path="eda.ipynb", cells=[0, "a1b2c3d4", "5:8"]).'
    )


# -- the SDK behaviour this works around --------------------------------------------------------


async def test_the_sdk_alone_still_decodes_json_looking_strings() -> None:
    """Why nbrelay takes argument handling over: a bare MCPServer tool with a ``str | None``
    parameter gets "[1]" as a list and refuses it. When an SDK release stops doing this, this
    test fails: the takeover in tools/sdk.py (hand_over_arguments) may then go."""
    server: MCPServer[Any] = MCPServer("bare")

    @server.tool()
    async def echo(text: str | None = None) -> str:
        return repr(text)

    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("echo", {"text": "[1]"})
    assert result.is_error
    assert "Input should be a valid string" in text_of(result)


# -- through the real CLI -------------------------------------------------------------------------


async def test_the_reported_cases_over_stdio(tmp_path: Path) -> None:
    """As the defects were found: `nbrelay serve` over stdio, driven by the official client."""
    root = tmp_path / "root"
    corpus(root)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(root), "--kernel-pool", "0"],
    )
    with anyio.fail_after(180):
        async with Client(params) as client:
            await call(client, "edit_cell", path="a.ipynb", cell=0, source="[1, 2, 3]")
            await call(client, "edit_cell", path="a.ipynb", cell=1, source='df["revenue"]')
            await call(
                client, "edit_cell", path="a.ipynb", cell=1, find='["revenue"]', replace=".x"
            )
            assert sources(root / "a.ipynb") == ["[1, 2, 3]", "df.x"]
            ran = await call(client, "execute", path="a.ipynb", code='{"a": 1}', wait=120)
            assert ran["cells"][0]["outputs"][0]["text"] == "{'a': 1}"
            listed = await call(client, "list_notebooks", pattern="null")
            assert listed["count"] == 0  # a glob that matches nothing, not "no pattern"
            refused: CallToolResult = await client.call_tool("read_notebook", {"path": 3})
            assert refused.is_error
            assert text_of(refused).startswith("Error executing tool read_notebook: Invalid `path`")
            assert not PYDANTIC.search(text_of(refused))
