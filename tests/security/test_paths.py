"""Path containment (plan G1): attack paths against every path parameter of every tool of every
profile, discovered from tools/list. All must be refused, nothing outside the root (or hidden
inside it) may be read or changed, and no canary content may appear in any result.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from nbrelay.server import PROFILES
from tests.helpers import notebook, write_notebook
from tests.http.harness import report, size, tree_digest
from tests.security.surface import (
    Tool,
    baseline,
    connect,
    discover,
    everything_said,
    path_tools,
    refused,
)
from tests.security.swaps import exchanging

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


# srcbook takes no paths (its sessions are named by id).
@pytest.mark.parametrize("profile", [p for p in PROFILES if p != "srcbook"])
async def test_a_name_too_long_for_any_file_system_is_refused_saying_so(
    profile: str, layout: Layout, tools: list[Tool]
) -> None:
    """A 300-character name (short of the 1024-character path limit) fails deep in the OS
    (ENAMETOOLONG): every path parameter of every tool refuses it first, naming the limit and
    the fix, and nothing is created."""
    long_names = ["n" * 300 + ".ipynb", "d" * 300 + "/x.ipynb", "sub/" + "é" * 200 + ".ipynb"]

    def listing() -> list[str]:
        return sorted(str(p) for p in layout.root.rglob("*"))

    failures: list[str] = []
    calls = 0
    async with connect(profile, layout.root, layout.locks) as client:
        for tool in (t for t in path_tools(tools) if t.profile == profile):
            with anyio.fail_after(60):
                plain = await client.call_tool(tool.name, baseline(tool, VALID))
            if refused(plain):  # its other arguments are refused before any path is looked at
                continue
            for param in tool.path_params:
                for name in long_names:
                    args = baseline(tool, VALID)
                    args[param] = name
                    before = listing()
                    with anyio.fail_after(60):
                        result = await client.call_tool(tool.name, args)
                    calls += 1
                    said = everything_said(result)
                    if listing() != before:
                        failures.append(f"{tool.id} {param}: changed the root")
                    if not refused(result):
                        failures.append(f"{tool.id} {param}: not refused")
                    elif "255 bytes" not in said or "shorter name" not in said:
                        failures.append(f"{tool.id} {param}: {said[-300:]}")
    assert calls
    assert not failures, f"{len(failures)} of {calls} calls: " + "\n".join(failures[:20])


@dataclass
class SwapLayout:
    """``swapdir`` and ``swapfile.ipynb`` in the root trade places with symlinks to ``outside``,
    whose files have the same names and canary contents (and one canary name)."""

    root: Path
    outside: Path
    locks: Path
    inside_fd: int  # the real folder, wherever its name is at the moment
    keep: Path  # a hidden hard link of the real notebook behind swapfile.ipynb
    canaries: dict[str, str]
    outside_tree: dict[str, bytes]

    def restore(self) -> None:
        """Put back what a call deleted or moved, inside the real folder and outside."""
        fd = self.inside_fd
        for name in ("empty", "sub"):
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=fd)
        for name, data in (("n.ipynb", _nb_bytes("inside")), ("doc.txt", b"inside\n")):
            with contextlib.suppress(FileExistsError):
                out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
                os.write(out, data)
                os.close(out)
        sub = os.open("sub", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        with contextlib.suppress(FileExistsError):
            out = os.open("n2.ipynb", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=sub)
            os.write(out, _nb_bytes("inside"))
            os.close(out)
        os.close(sub)
        names = [self.root / "swapfile.ipynb", self.root / "swapfile-link"]
        if not any(p.is_file() and not p.is_symlink() for p in names):
            for p in names:
                if not os.path.lexists(p):
                    os.link(self.keep, p)
                    break
        _write_tree(self.outside, self.outside_tree)

    def outside_now(self) -> dict[str, bytes]:
        return _read_tree(self.outside)


def _nb_bytes(marker: str) -> bytes:
    from nbrelay.notebook.model import serialize

    return serialize(notebook(f"secret = '{marker}'"))


def _read_tree(folder: Path) -> dict[str, bytes]:
    """Every entry under ``folder``: files by content, folders and links marked."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, folder)
            if os.path.islink(full):
                out[rel] = b"->" + os.readlink(full).encode()
            elif os.path.isdir(full):
                out[rel] = b"<folder>"
            else:
                out[rel] = Path(full).read_bytes()
    return out


def _write_tree(folder: Path, tree: dict[str, bytes]) -> None:
    """Make ``folder`` hold exactly ``tree`` again."""
    now = _read_tree(folder)
    for rel in sorted(set(now) - set(tree), reverse=True):
        full = folder / rel
        if full.is_dir() and not full.is_symlink():
            shutil.rmtree(full)
        elif os.path.lexists(full):
            full.unlink()
    for rel, data in sorted(tree.items()):
        full = folder / rel
        if data == b"<folder>":
            full.mkdir(exist_ok=True)
        elif now.get(rel) != data:
            full.write_bytes(data)


def make_swap_layout(base: Path) -> SwapLayout:
    root, outside = base / "root", base / "outside"
    canaries = {k: f"CANARY{k}{secrets.token_hex(6)}" for k in ("n", "n2", "doc", "file", "name")}
    (outside / "empty").mkdir(parents=True)
    (outside / "sub").mkdir()
    (outside / "n.ipynb").write_bytes(_nb_bytes(canaries["n"]))
    (outside / "sub" / "n2.ipynb").write_bytes(_nb_bytes(canaries["n2"]))
    (outside / "doc.txt").write_text(canaries["doc"] + "\n")
    (outside / "secret.ipynb").write_bytes(_nb_bytes(canaries["file"]))
    (outside / f"{canaries['name']}.ipynb").write_bytes(_nb_bytes("listed"))
    (root / "swapdir").mkdir(parents=True)
    os.symlink(outside, root / "swaplink")
    (root / ".keep").mkdir()
    keep = root / ".keep" / "swapfile.ipynb"
    keep.write_bytes(_nb_bytes("inside"))
    os.link(keep, root / "swapfile.ipynb")
    os.symlink(outside / "secret.ipynb", root / "swapfile-link")
    write_notebook(root / "ok.ipynb", notebook("print('ok')"))
    fd = os.open(root / "swapdir", os.O_RDONLY | os.O_DIRECTORY)
    lay = SwapLayout(root, outside, base / "locks", fd, keep, canaries, _read_tree(outside))
    lay.restore()
    return lay


# Where each path parameter points, round by round: notebooks, files, folders (existing or not)
# in the swapped folder, and the swapped notebook. Sources exist; the new names do not.
SWAP_TARGETS = [
    "swapdir/n.ipynb",
    "swapfile.ipynb",
    "swapdir/doc.txt",
    "swapdir/sub/n2.ipynb",
    "swapdir/empty",
    "swapdir",
    "swapdir/new-{k}.ipynb",
    "swapdir/made-{k}/new.ipynb",
    "swapdir/sub",
]


@contextlib.contextmanager
def swapping_process(lay: SwapLayout) -> Iterator[None]:
    r = lay.root
    with exchanging([(r / "swapdir", r / "swaplink"), (r / "swapfile.ipynb", r / "swapfile-link")]):
        yield


# srcbook's tools take session ids, never paths (checked below).
PATH_PROFILES = [p for p in PROFILES if p != "srcbook"]


async def test_every_profile_but_srcbook_has_path_tools(tools: list[Tool]) -> None:
    with_paths = {t.profile for t in path_tools(tools)}
    assert with_paths == set(PATH_PROFILES)


@pytest.mark.parametrize("profile", PATH_PROFILES)
async def test_symlinks_swapped_during_every_path_tool_never_read_delete_or_create_outside(
    profile: str,
    tools: list[Tool],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """G1 race: while a folder and a notebook are exchanged with symlinks to outside the root
    (RENAME_EXCHANGE in a loop, in another process), every path parameter of every tool of the
    profile is pointed into them, round after round. Nothing outside the root may be read
    (its canaries in a result, or copied into the root), deleted, created or changed."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # install_packages fails fast, offline
    lay = make_swap_layout(tmp_path / "swap")
    mine = [t for t in path_tools(tools) if t.profile == profile]
    params = [(t, p) for t in mine for p in t.path_params]
    rounds = size(len(SWAP_TARGETS) * 4, len(SWAP_TARGETS) * 20)
    counts = dict.fromkeys(("calls", "answered", "refused"), 0)
    read: set[str] = set()
    deleted: set[str] = set()
    created: set[str] = set()
    changed: set[str] = set()
    extra = {"notebook": "swapdir/n.ipynb"} if profile == "notebook-lr" else {}
    async with connect(profile, lay.root, lay.locks, **extra) as client:
        # Without the swaps, the same calls work inside the root (so a refusal in the race is
        # the race's doing): with only two path parameters, as notebook-lr has, the racing
        # rounds alone may by chance never catch the folder in place.
        calm = 0
        for tool, param in params:
            args = baseline(tool, VALID)
            args[param] = SWAP_TARGETS[0]
            if "packages" in args:
                args["packages"] = ["nbrelay-no-such-package"]
            with anyio.fail_after(120):
                calm += not refused(await client.call_tool(tool.name, args))
            lay.restore()
        assert calm > 0, f"no {profile} path tool worked inside the root without the swaps"
        with swapping_process(lay):  # after start-up (notebook-lr checks --notebook there)
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
                    where = f"{tool.id} {param}={args[param]!r}"
                    read |= {f"{n} ({where})" for n, c in lay.canaries.items() if c in said}
                    deleted |= {f"{rel} ({where})" for rel in before.keys() - now.keys()}
                    created |= {f"{rel} ({where})" for rel in now.keys() - before.keys()}
                    changed |= {
                        f"{rel} ({where})"
                        for rel in before.keys() & now.keys()
                        if before[rel] != now[rel]
                    }
                    lay.restore()
    os.close(lay.inside_fd)
    figures = (
        f"{len(read)} files read, {len(deleted)} deleted, {len(created)} created and "
        f"{len(changed)} changed outside the root in {counts['calls']} calls"
    )
    escaped = len(read) + len(deleted) + len(created) + len(changed)
    assert escaped == 0, (
        f"{figures}: read {sorted(read)}; deleted {sorted(deleted)[:10]}; created "
        f"{sorted(created)[:10]}; changed {sorted(changed)[:10]}"
    )
    assert counts["refused"] > 0, counts  # the swaps did hit the calls
    report(
        request,
        f"G1 swap race {profile}: {len(params)} path parameters of {len(mine)} tools x {rounds} "
        f"rounds while a folder and a notebook were exchanged with symlinks out of the root "
        f"(RENAME_EXCHANGE loop): {figures} ({counts['answered']} answered, "
        f"{counts['refused']} refused)",
    )


def _root_text(root: Path) -> str:
    """Everything under the root (outside content copied in counts as read), walked by
    descriptors: the swapped symlinks are never followed by the measurement itself."""
    parts = []
    for _, dirnames, filenames, dfd in os.fwalk(root):
        for name in filenames:
            with contextlib.suppress(OSError):
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
                with os.fdopen(fd, "rb") as fh:
                    parts.append(fh.read().decode(errors="replace"))
        parts.extend(filenames + dirnames)
    return "\n".join(parts)


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
