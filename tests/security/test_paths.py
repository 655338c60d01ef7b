"""Path containment (plan G1): attack paths against every path parameter of every tool of every
profile, discovered from tools/list. All must be refused, nothing outside the root (or hidden
inside it) may be read or changed, and no canary content may appear in any result.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from nbrelay.server import PROFILES
from tests.helpers import notebook, write_notebook
from tests.http.harness import report, tree_digest
from tests.security.surface import (
    Tool,
    baseline,
    connect,
    discover,
    everything_said,
    path_tools,
    refused,
)

pytestmark = pytest.mark.anyio


@dataclass
class Layout:
    base: Path
    root: Path
    locks: Path
    canaries: list[str]

    def outside_digest(self) -> dict[str, bytes]:
        """Every file outside the root, and every hidden file inside it."""
        digest = tree_digest(self.base, skip=[self.root, self.locks])
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in [*filenames, *dirnames]:
                full = Path(dirpath) / name
                if name.startswith(".") and full.is_file() and not full.is_symlink():
                    digest[str(full)] = full.read_bytes()
        return digest


def _canary_notebook(path: Path, marker: str) -> None:
    write_notebook(path, notebook(f"secret = '{marker}'"))


def make_layout(base: Path) -> Layout:
    root = base / "root"
    evil = base / "root-evil"
    outside = base / "outside"
    for d in (root, evil, outside, root / "sub"):
        d.mkdir(parents=True)
    canaries = [f"CANARY{secrets.token_hex(8)}" for _ in range(8)]
    _canary_notebook(outside / "secret.ipynb", canaries[0])
    _canary_notebook(evil / "secret.ipynb", canaries[1])
    (outside / "passwd").write_text(f"root:x:0:0:{canaries[2]}:/root:/bin/sh\n")
    _canary_notebook(root / ".hidden.ipynb", canaries[3])
    (root / ".env").write_text(f"TOKEN={canaries[4]}\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(f"[core]\n# {canaries[5]}\n")
    _canary_notebook(outside / "n.ipynb", canaries[6])
    _canary_notebook(base / "x.ipynb", canaries[7])
    write_notebook(root / "ok.ipynb", notebook("print('ok')"))
    write_notebook(root / "sub" / "ok2.ipynb", notebook("print('ok2')"))
    os.symlink(outside / "secret.ipynb", root / "link-out.ipynb")
    os.symlink(outside, root / "dir-out")
    os.symlink("/dev/zero", root / "zero.ipynb")
    os.mkfifo(root / "fifo.ipynb")
    os.symlink("fifo.ipynb", root / "fifo-link.ipynb")
    os.symlink(root / ".hidden.ipynb", root / "shown.ipynb")
    return Layout(base, root, base / "locks", canaries)


def attacks(layout: Layout) -> list[str]:
    b, r = str(layout.base), str(layout.root)
    return [
        "../x.ipynb",
        "a/../../x.ipynb",
        "../outside/secret.ipynb",
        "../root-evil/secret.ipynb",
        f"{b}/root-evil/secret.ipynb",  # a sibling that shares the root's prefix
        f"{b}/outside/secret.ipynb",
        f"{r}/../outside/secret.ipynb",
        f"{r}/link-out.ipynb",
        "/etc/passwd",
        "//etc/passwd",
        "/../etc/passwd",
        "~/.ssh/id_rsa",
        "file:///etc/passwd",
        f"file://{b}/outside/secret.ipynb",
        "%2e%2e%2fx.ipynb",
        "%2e%2e/outside/secret.ipynb",
        "..%2fx.ipynb",
        "%252e%252e%252fx.ipynb",
        "\uff0e\uff0e\uff0fx.ipynb",  # fullwidth ../ (NFKC folds it to ../)
        "\uff0e\uff0e/outside/secret.ipynb",
        "sub\uff0f\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fx.ipynb",
        "..\\..\\x.ipynb",
        "..\\outside\\secret.ipynb",
        "C:\\x.ipynb",
        "\\\\srv\\share\\x.ipynb",
        "a\x00.ipynb",
        "ok.ipynb\x00/../../x.ipynb",
        "a" * 4096 + ".ipynb",
        "a/" * 2100 + "x.ipynb",
        "link-out.ipynb",  # file symlink out of the root
        "dir-out/secret.ipynb",  # directory symlink out of the root
        "dir-out",
        "zero.ipynb",  # /dev/zero through a symlink
        "fifo.ipynb",  # a FIFO: opening it would block
        "fifo-link.ipynb",
        "shown.ipynb",  # a symlink to a hidden file
        ".env",
        ".git/config",
        ".hidden.ipynb",
        "sub/../.hidden.ipynb",
        "sub/../../outside/secret.ipynb",
        "./../x.ipynb",
        "ok.ipynb/../../outside/secret.ipynb",
        "..",
    ]


# Seeds whose own conventions turn an attack input into a harmless path inside the root. A call
# with such an input may answer instead of refusing; the canary and outside-digest checks still
# apply to it. Every other input must be refused.
# jupyterlab-rtc: JupyterLab paths are relative to the lab root, so "/a/b" is "a/b" under it.
ROOT_RELATIVE_ABSOLUTE = {"jupyterlab-rtc"}
# mcp-jupyter, jupyterlab-rtc (create_document): ".ipynb" is added to a path without an
# extension, so "dir-out" is "dir-out.ipynb", a new notebook, not the symlinked folder.
ADDS_SUFFIX = {"mcp-jupyter", "jupyterlab-rtc"}


def harmless_here(profile: str, attack: str) -> bool:
    if profile in ROOT_RELATIVE_ABSOLUTE and attack.startswith("/") and "/../" not in attack:
        return True
    return profile in ADDS_SUFFIX and attack == "dir-out"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return make_layout(tmp_path_factory.mktemp("paths"))


@pytest.fixture(scope="module")
async def tools(layout: Layout) -> list[Tool]:
    return await discover(layout.root, layout.locks)


async def test_path_parameters_are_discovered_for_every_profile(tools: list[Tool]) -> None:
    assert {t.profile for t in tools} == set(PROFILES)
    assert len(path_tools(tools)) >= 40
    names = {(t.profile, t.name, p) for t in tools for p in t.path_params}
    assert ("canonical", "read_notebook", "path") in names
    assert ("canonical", "list_notebooks", "folder") in names


# Values of other path parameters while one is attacked: sources exist, targets do not.
VALID = {
    "path": "ok.ipynb",
    "filepath": "ok.ipynb",
    "notebook_path": "ok.ipynb",
    "folder": "",
    "root_path": "",
    "newPath": "renamed.ipynb",
    "copyPath": "copied.ipynb",
    "to": "exported.py",
    "source": "ok.ipynb",
}


@pytest.mark.parametrize("profile", PROFILES)
async def test_every_attack_path_is_refused_by_every_path_tool(
    profile: str, layout: Layout, tools: list[Tool], request: pytest.FixtureRequest
) -> None:
    mine = [t for t in path_tools(tools) if t.profile == profile]
    paths = attacks(layout)
    assert len(paths) >= 40
    before = layout.outside_digest()
    failures: list[str] = []
    calls = refusals = inside = 0
    async with connect(profile, layout.root, layout.locks) as client:
        for tool in mine:
            for param in tool.path_params:
                for attack in paths:
                    args = baseline(tool, VALID)
                    args[param] = attack
                    with anyio.fail_after(60):
                        result = await client.call_tool(tool.name, args)
                    calls += 1
                    said = everything_said(result)
                    if refused(result):
                        refusals += 1
                    elif harmless_here(profile, attack):
                        inside += 1
                    else:
                        failures.append(f"{tool.id} {param}={attack[:60]!r} was not refused")
                    leaked = [c for c in layout.canaries if c in said] + (
                        ["/etc/passwd"] if "root:x:0:0" in said else []
                    )
                    if leaked:
                        failures.append(f"{tool.id} {param}={attack[:60]!r} leaked {leaked}")
                    if "internal error" in said or "Traceback" in said:
                        failures.append(f"{tool.id} {param}={attack[:60]!r} crashed: {said[:200]}")
    after = layout.outside_digest()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"files outside the root or hidden changed: {changed}"
    assert not failures, f"{len(failures)} of {calls} calls: " + "\n".join(failures[:40])
    report(
        request,
        f"G1 {profile}: {len(paths)} attack paths x {sum(len(t.path_params) for t in mine)} path "
        f"parameters of {len(mine)} tools = {calls} calls: {refusals} refused"
        + (f", {inside} read as paths inside the root by the seed's convention" if inside else "")
        + "; 0 canaries read, 0 files outside the root changed",
    )


def _swapper(root: Path, outside: Path, stop: threading.Event) -> None:
    """Flip a notebook (hard link inside <-> symlink out) and a folder (real <-> symlink out)."""
    real_nb = root / "swap-real.ipynb"
    parked = root / "swapdir-parked"
    link, folder, tmp = root / "swap.ipynb", root / "swapdir", root / "swap.tmp"
    while not stop.is_set():
        if link.is_symlink():
            os.link(real_nb, tmp)
        else:
            os.symlink(outside / "secret.ipynb", tmp)
        os.replace(tmp, link)
        if folder.is_symlink():
            folder.unlink()
            os.rename(parked, folder)
        else:
            os.rename(folder, parked)
            os.symlink(outside, folder)
        time.sleep(0.0005)


@pytest.fixture
def swapping(tmp_path: Path) -> Iterator[Layout]:
    lay = make_layout(tmp_path / "swap")
    write_notebook(lay.root / "swap-real.ipynb", notebook("inside"))
    os.link(lay.root / "swap-real.ipynb", lay.root / "swap.ipynb")
    write_notebook(lay.root / "swapdir" / "n.ipynb", notebook("inside"))
    stop = threading.Event()
    thread = threading.Thread(target=_swapper, args=(lay.root, lay.base / "outside", stop))
    thread.start()
    try:
        yield lay
    finally:
        stop.set()
        thread.join(timeout=30)


async def test_symlinks_swapped_between_check_and_use_never_leak_or_escape(
    swapping: Layout, request: pytest.FixtureRequest
) -> None:
    lay = swapping
    before = lay.outside_digest()
    counts = {"answered": 0, "refused": 0}
    rounds = 150
    async with connect("canonical", lay.root, lay.locks) as client:
        for n in range(rounds):
            for tool, args in [
                ("read_notebook", {"path": "swap.ipynb", "full": True}),
                ("read_notebook", {"path": "swapdir/n.ipynb", "full": True}),
                ("search_notebook", {"path": "swapdir/n.ipynb", "pattern": "secret"}),
                ("insert_cells", {"path": "swapdir/n.ipynb", "cells": [f"x{n}"]}),
                ("edit_cell", {"path": "swap.ipynb", "cell": 0, "source": f"inside {n}"}),
                ("list_notebooks", {"folder": "swapdir"}),
            ]:
                with anyio.fail_after(60):
                    result = await client.call_tool(tool, cast(dict[str, Any], args))
                said = everything_said(result)
                assert not [c for c in lay.canaries if c in said], (tool, args, said[:300])
                assert "internal error" not in said, (tool, args, said[:300])
                counts["refused" if refused(result) else "answered"] += 1
    after = lay.outside_digest()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"files outside the root changed: {changed}"
    assert counts["answered"] > 0
    assert counts["refused"] > 0
    report(
        request,
        f"G1 swap race: {rounds * 6} calls while a file and a folder flipped between real and "
        f"symlinked-outside: {counts['answered']} answered from inside, {counts['refused']} "
        "refused, 0 canaries read, 0 files outside changed",
    )


def _expand(template: str, path: str) -> str:
    uri = re.sub(r"\{\?[^}]*\}", "", template)
    uri = uri.replace("{+path}", path).replace("{path}", path)
    return re.sub(r"\{[^}]*\}", "0", uri)


@pytest.mark.parametrize("profile", PROFILES)
async def test_resource_templates_refuse_every_attack_path(
    profile: str, layout: Layout, request: pytest.FixtureRequest
) -> None:
    """The same attacks through every resource template that takes a path."""
    paths = attacks(layout)
    before = layout.outside_digest()
    failures: list[str] = []
    reads = 0
    async with connect(profile, layout.root, layout.locks) as client:
        templates = [
            t.uri_template
            for t in (await client.list_resource_templates()).resource_templates
            if re.search(r"\{\+?path\}", t.uri_template)
        ]
        for template in templates:
            for attack in paths:
                uri = _expand(template, attack)
                reads += 1
                try:
                    with anyio.fail_after(60):
                        result = await client.read_resource(uri)
                except MCPError as exc:
                    said = str(exc)
                else:
                    said = json.dumps(result.model_dump(mode="json"))
                    failures.append(f"{uri[:90]!r} was not refused")
                leaked = [c for c in layout.canaries if c in said]
                if leaked or "root:x:0:0" in said:
                    failures.append(f"{uri[:90]!r} leaked {leaked}")
    after = layout.outside_digest()
    assert before == after
    assert not failures, f"{len(failures)} of {reads}: " + "\n".join(failures[:30])
    report(
        request,
        f"G1 resources {profile}: {len(paths)} attack paths x {len(templates)} path templates "
        f"= {reads} reads: all refused, 0 canaries read",
    )
