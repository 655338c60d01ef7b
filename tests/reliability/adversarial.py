"""A randomized adversarial run with a fixed seed: agents and people on the same notebooks while
servers are stopped, killed and restarted and files are rewritten from outside.

Shared by the CI test (``tests/reliability/test_adversarial.py``, a few seeds, few rounds) and the
bench driver (``bench/adversarial.py``, as long as one likes). Everything is real: nbrelay as a
subprocess (``nbrelay serve --http``; in live mode on a real JupyterLab with
jupyter-collaboration) or inside that JupyterLab (extension mode), the official MCP client (MCP
sessions and a sessionless client), people as pycrdt clients in the notebooks' rooms
(``tests.live.person``), the files read back with nbformat.

Every change writes a unique token ``{who}{n}.{j}@{cell};`` (``A`` an agent, ``K`` a person's
keystroke or an outside writer's, ``O`` a cell added from outside) naming the cell it belongs in,
and every cell's key names its notebook (``...b{nb}...``). An agent's own cell holds exactly one
token (its latest version); a person's cell is ``{key}|`` followed by the keystrokes typed in it;
each notebook has one shared cell ``Sb{nb}|`` that agents append to (reading first and passing the
version they read; once the overview shows the grown cell as a shortened preview, an agent reads
it whole half the time and writes the preview back the other half) and people type into.

What is counted at the end, from the files (``count``):

* lost edits: an agent's edit it was told succeeded whose effect is not in the file, unless a later
  edit it was told succeeded replaced it (the same agent's next version of its cell, or an edit of
  the shared cell made without it), nbrelay named it in a result as not applied again after a
  crash, or a writer outside nbrelay rewrote the file from a copy read before the edit was made
  (counted apart as ``outside_overwrote``);
* duplicated cells: a cell key in more than one cell (and tokens present more than once);
* wrong cell / wrong notebook: a token in a cell other than the one it names, a cell in a
  notebook other than its own;
* lost keystrokes: a keystroke (or an outside writer's token) missing from the file, unless its
  person deleted the cell, or an outside rewrite read before it was typed replaced it;
* silent overwrites: an edit made against a stale version that was applied without error, a
  cell's shortened preview (what the overview shows of a long cell) written back as its whole
  source that was applied, and a cell written from outside that vanished.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import secrets
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import nbformat
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import text_of
from tests.http.harness import RunningServer, canary_token, http_server
from tests.live.server import JupyterServer, free_port
from tests.servers import stop_by_pid

MODES = ("file", "live", "extension")
TOKEN = re.compile(r"([AKO])(\d+)\.(\d+)@([A-Za-z0-9]+);")
CALL_LIMIT = 60.0  # seconds: a call that hangs longer counts as not acknowledged
SETTLE = 60.0  # seconds to wait for the files to hold what is expected at the end


def nb_of(key: str) -> int:
    found = re.search(r"b(\d+)", key)
    assert found, key
    return int(found.group(1))


@dataclass
class Edit:
    """One change an agent asked for."""

    agent: int
    nb: int
    kind: str  # insert | edit | delete | shared | stale
    key: str  # the cell key (the agent's cell, or Sb{nb})
    token: str  # the token written ("" for a delete)
    sent: float
    acked: float | None = None  # when the agent was told it succeeded
    source: str = ""  # the shared cell's source it wrote
    cell_id: str = ""
    read_at: float = 0.0  # when the read it was based on began (shared-cell edits)


@dataclass
class Keystroke:
    token: str
    key: str
    nb: int
    at: float
    deleted: bool = False  # its person deleted the cell


@dataclass
class Rewrite:
    """A rewrite of a notebook's file from outside nbrelay."""

    nb: int
    read_at: float
    written_at: float
    seen: set[str]  # the tokens of the copy it read
    added: str  # the key of the cell it added ("" if none)


@dataclass
class Figures:
    mode: str
    seed: int
    rounds: int = 0
    operations: int = 0
    acknowledged: int = 0
    refused: int = 0
    keystrokes: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)  # why calls failed, in brief
    lost_edits: int = 0
    duplicated_cells: int = 0
    wrong_cell: int = 0
    wrong_notebook: int = 0
    lost_keystrokes: int = 0
    silent_overwrites: int = 0
    named_lost: int = 0
    outside_overwrote: int = 0
    details: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "lost_edits": self.lost_edits,
            "duplicated_cells": self.duplicated_cells,
            "wrong_cell": self.wrong_cell,
            "wrong_notebook": self.wrong_notebook,
            "lost_keystrokes": self.lost_keystrokes,
            "silent_overwrites": self.silent_overwrites,
        }

    def line(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in self.counts().items())
        return (
            f"adversarial {self.mode} seed {self.seed}: {self.rounds} rounds, "
            f"{self.operations} agent operations ({self.acknowledged} acknowledged, "
            f"{self.refused} refused or failed), {self.keystrokes} keystrokes; faults: {faults}; "
            f"{counts}; named lost by nbrelay {self.named_lost}, overwritten from outside "
            f"{self.outside_overwrote}; refused or failed: "
            + ("; ".join(f"{k} ×{v}" for k, v in self.refusals.most_common()) or "none")
        )


@dataclass
class Ledger:
    edits: list[Edit] = field(default_factory=list)
    keystrokes: dict[str, Keystroke] = field(default_factory=dict)
    rewrites: list[Rewrite] = field(default_factory=list)
    notes: list[tuple[float, str]] = field(default_factory=list)
    outside_cells: dict[str, float] = field(default_factory=dict)  # key -> written at


def _reason(text: str) -> str:
    """A refusal's gist: its first clause, without the names in it."""
    text = re.sub(r"^Error executing tool \w+:\s*", "", text)
    text = re.sub(r"'[^']*'|\b[0-9a-f]*\d[0-9a-f]*\b", "…", text)
    return re.split(r"[.:;(]", text, maxsplit=1)[0][:70]


def tokens_in(text: str) -> list[str]:
    return [m.group(0) for m in TOKEN.finditer(text)]


def cell_key(source: str) -> str:
    """The key of the cell holding ``source``: its ``key|`` head, or the cell its token names."""
    head = source.split("|", 1)[0]
    if "|" in source and re.fullmatch(r"[A-Z]\d*b\d+n?\d*", head):
        return head
    found = TOKEN.match(source)
    return found.group(4) if found else ""


def read_cells(path: Path) -> list[tuple[str, str]]:
    """(id, source) of each cell, read with nbformat."""
    nb = nbformat.read(str(path), as_version=4)
    return [(str(c.get("id", "")), str(c.source)) for c in nb.cells]


class Run:
    """One adversarial run in one mode."""

    def __init__(
        self,
        mode: str,
        seed: int,
        base: Path,
        *,
        agents: int = 3,
        people: int = 2,
        notebooks: int = 2,
        ops: int = 6,
        browser: bool = False,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        assert mode in MODES, mode
        self.mode = mode
        self.rng = random.Random(seed)
        self.fault_rng = random.Random(seed)
        self.base = base
        self.root = base / "root"
        self.n_agents = agents
        self.n_people = people
        self.n_nbs = notebooks
        self.ops = ops
        self.browser = browser and mode != "file"
        self.log = log
        self.ledger = Ledger()
        self.figures = Figures(mode, seed)
        self.jupyter: JupyterServer | None = None
        self.relay: RunningServer | None = None
        self._relay_stack = contextlib.ExitStack()
        self.url = ""
        self.token = ""
        self.counter = 0
        self.clients: dict[int, Client] = {}
        self._stacks: dict[int, contextlib.AsyncExitStack] = {}

    # ----- servers
    def path(self, nb: int) -> str:
        return f"n{nb}.ipynb"

    def file(self, nb: int) -> Path:
        return self.root / self.path(nb)

    def next(self) -> int:
        self.counter += 1
        return self.counter

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for nb in range(self.n_nbs):
            book = nbformat.v4.new_notebook()
            # A kernel named, so that JupyterLab opens it without asking for one.
            book.metadata["kernelspec"] = {
                "name": "python3",
                "display_name": "Python 3",
                "language": "python",
            }
            cell = nbformat.v4.new_code_cell(f"Sb{nb}|")
            cell["id"] = f"shared{nb}"
            book.cells.append(cell)
            self.file(nb).write_text(nbformat.writes(book), encoding="utf-8")
        if self.mode != "file":
            self.jupyter = JupyterServer(
                root=self.root,
                work=self.base / "work",
                port=free_port(),
                nbrelay=self.mode == "extension",
            )
            self.jupyter.start()
        self._start_relay()

    def _start_relay(self) -> None:
        if self.mode == "extension":
            assert self.jupyter is not None
            self.url, self.token = f"{self.jupyter.url}mcp", self.jupyter.token
            return
        args: list[str] = ["--no-execute"]
        env: dict[str, str] = {}
        if self.mode == "live":
            assert self.jupyter is not None
            args += ["--jupyter-url", self.jupyter.url]
            env["JUPYTER_TOKEN"] = self.jupyter.token
        self._relay_stack = contextlib.ExitStack()
        self.relay = self._relay_stack.enter_context(
            http_server(self.root, self.base, *args, token=canary_token("adv"), env=env)
        )
        self.url, self.token = self.relay.url, self.relay.token

    def stop(self) -> None:
        self._relay_stack.close()
        if self.jupyter is not None:
            self.jupyter.stop()

    def fault(self, kind: str) -> None:
        """Stop (SIGTERM) or kill (SIGKILL) what serves the notebooks, and start it again."""
        self.figures.faults[kind] += 1
        self.log(f"fault: {kind}")
        if self.mode == "file":
            assert self.relay is not None
            if kind == "kill -9":
                os.kill(self.relay.proc.pid, signal.SIGKILL)
                self.relay.proc.wait(10)
            else:
                stop_by_pid(self.relay.proc)
            self._relay_stack.close()
            self._start_relay()
            return
        assert self.jupyter is not None
        if kind == "kill -9":
            self.jupyter.kill()
        else:
            self.jupyter.stop()
        self.jupyter.start()
        if self.mode == "extension":
            self._start_relay()

    # ----- agents
    @contextlib.asynccontextmanager
    async def _client(self, sessionless: bool) -> AsyncIterator[Client]:
        scheme = "token" if self.mode == "extension" else "Bearer"
        timeout = httpx2.Timeout(CALL_LIMIT, read=CALL_LIMIT)
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"{scheme} {self.token}"}, timeout=timeout
            ) as http,
            Client(
                streamable_http_client(self.url, http_client=http),
                mode="auto" if sessionless else "legacy",
            ) as client,
        ):
            yield client

    async def call(self, agent: int, tool: str, **args: Any) -> dict[str, Any] | None:
        """The result's data when the call succeeded, None when it failed or was refused."""
        client = self.clients.get(agent)
        if client is None:
            return None
        result: Any = None
        with anyio.move_on_after(CALL_LIMIT):
            try:
                result = await client.call_tool(tool, args)
            except Exception as exc:  # a server gone is a failed call
                self.log(f"agent {agent} {tool}: {type(exc).__name__}")
                self.figures.refusals["connection lost"] += 1
                self.clients.pop(agent, None)
                return None
        if result is None:
            self.figures.refusals["no answer in time"] += 1
            return None
        text = text_of(result)
        if "did not apply them again" in text or "too many to remember" in text:
            self.ledger.notes.append((time.monotonic(), text))
        if result.is_error:
            self.figures.refusals[_reason(text)] += 1
            return None
        data = result.structured_content
        if data is None:
            data = json.loads(text)
        note = data.get("note", "") if isinstance(data, dict) else ""
        if note and ("did not apply them again" in note or "too many to remember" in note):
            self.ledger.notes.append((time.monotonic(), note))
        return data if isinstance(data, dict) else {"result": data}

    async def agent_loop(
        self, agent: int, inbox: Any, outbox: Any, own: dict[str, tuple[int, str]]
    ) -> None:
        """An agent's life: it keeps its MCP client across rounds, reconnecting when the server
        that held it went away."""
        sessionless = agent == self.n_agents - 1
        try:
            while True:
                command = await inbox.receive()
                if command == "stop":
                    break
                if command == "reconnect" or agent not in self.clients:
                    stack = self._stacks.pop(agent, None)
                    self.clients.pop(agent, None)
                    if stack is not None:
                        # (in this task, outside any new cancel scope: the client's task
                        # group was entered here)
                        with contextlib.suppress(Exception):
                            await stack.aclose()
                    stack = contextlib.AsyncExitStack()
                    try:
                        # (no timeout scope around it: the client's task group outlives it;
                        # its HTTP client's own timeouts bound it)
                        client = await stack.enter_async_context(self._client(sessionless))
                        self.clients[agent] = client
                        self._stacks[agent] = stack
                    except Exception as exc:
                        self.log(f"agent {agent} could not connect: {exc!r}")
                if command == "read":
                    for nb in range(self.n_nbs):
                        await self.call(agent, "read_notebook", path=self.path(nb))
                elif command == "ops":
                    for _ in range(self.ops):
                        await self.agent_op(agent, own)
                elif command == "burst":
                    await self.agent_op(agent, own, kind="edit")
                await outbox.send(command)
        finally:
            self.clients.pop(agent, None)
            stack = self._stacks.pop(agent, None)
            if stack is not None:
                with contextlib.suppress(Exception):
                    await stack.aclose()

    def _edit(self, agent: int, nb: int, kind: str, key: str, token: str) -> Edit:
        edit = Edit(agent, nb, kind, key, token, time.monotonic())
        self.ledger.edits.append(edit)
        self.figures.operations += 1
        return edit

    def _done(self, edit: Edit, data: dict[str, Any] | None) -> None:
        if data is None:
            self.figures.refused += 1
        else:
            edit.acked = time.monotonic()
            self.figures.acknowledged += 1

    async def agent_op(self, agent: int, own: dict[str, tuple[int, str]], kind: str = "") -> None:
        rng = self.rng
        nb = rng.randrange(self.n_nbs)
        path = self.path(nb)
        mine = [k for k, (n, _) in own.items() if n == nb]
        if not kind:
            kind = rng.choices(
                ["insert", "edit", "index", "delete", "shared", "stale"],
                [3 if len(mine) < 3 else 1, 4, 3, 1, 2, 1],
            )[0]
        if kind in ("edit", "index", "delete") and not mine:
            kind = "insert"
        if kind == "insert":
            key = f"C{agent}b{nb}n{self.next()}"
            token = f"A{agent}.{self.next()}@{key};"
            edit = self._edit(agent, nb, "insert", key, token)
            view = await self.call(agent, "read_notebook", path=path)
            index = rng.randint(0, len(view["cells"])) if view else 0
            data = await self.call(agent, "insert_cells", path=path, cells=[token], index=index)
            self._done(edit, data)
            if data is not None:
                cell_id = str(data["changed"][0]["id"])
                edit.cell_id = cell_id
                own[key] = (nb, cell_id)
            return
        if kind in ("edit", "index", "delete"):
            key = rng.choice(mine)
            cell_id = own[key][1]
            target: str | int = cell_id
            if kind == "index":
                view = await self.call(agent, "read_notebook", path=path)
                ids = [c["id"] for c in view["cells"]] if view else []
                if cell_id not in ids:
                    return
                target = ids.index(cell_id)
            if kind == "delete":
                edit = self._edit(agent, nb, "delete", key, "")
                data = await self.call(agent, "delete_cells", path=path, cells=[cell_id])
                self._done(edit, data)
                if data is not None:
                    own.pop(key)
                return
            token = f"A{agent}.{self.next()}@{key};"
            edit = self._edit(agent, nb, "edit", key, token)
            data = await self.call(agent, "edit_cell", path=path, cell=target, source=token)
            self._done(edit, data)
            return
        # The shared cell: read it, append a token, passing the version read. "stale" makes
        # someone else change it first: the edit must then be refused.
        key = f"Sb{nb}"
        read_at = time.monotonic()
        view = await self.call(agent, "read_notebook", path=path)
        if view is None:
            return
        shared = [c for c in view["cells"] if c["id"] == f"shared{nb}"]
        if not shared:
            return
        whole = await self._whole_source(agent, nb, shared[0]["source"], view["version"])
        if whole is None:
            return
        source, version, preview = whole
        if kind == "stale" and not await self.interfere(agent, nb):
            return
        token = f"A{agent}.{self.next()}@{key};"
        edit = self._edit(agent, nb, kind, key, token)
        edit.source = source + token
        edit.read_at = read_at
        data = await self.call(
            agent,
            "edit_cell",
            path=path,
            cell=f"shared{nb}",
            source=edit.source,
            expected_version=version,
        )
        self._done(edit, data)
        self._preview_applied(edit, data, preview)
        if kind == "stale" and data is not None:
            self.figures.silent_overwrites += 1
            self.figures.details.append(
                f"stale edit applied: {token} over a change it had not read"
            )

    async def interfere(self, agent: int, nb: int) -> bool:
        """Change the shared cell behind ``agent``'s back (another agent appends to it)."""
        other = (agent + 1) % self.n_agents
        if other == agent:
            return False
        path = self.path(nb)
        read_at = time.monotonic()
        view = await self.call(other, "read_notebook", path=path)
        if view is None:
            return False
        shared = [c for c in view["cells"] if c["id"] == f"shared{nb}"]
        if not shared:
            return False
        whole = await self._whole_source(other, nb, shared[0]["source"], view["version"])
        if whole is None:
            return False
        source, version, preview = whole
        token = f"A{other}.{self.next()}@Sb{nb};"
        edit = self._edit(other, nb, "shared", f"Sb{nb}", token)
        edit.source = source + token
        edit.read_at = read_at
        data = await self.call(
            other,
            "edit_cell",
            path=path,
            cell=f"shared{nb}",
            source=edit.source,
            expected_version=version,
        )
        self._done(edit, data)
        self._preview_applied(edit, data, preview)
        return data is not None

    async def _whole_source(
        self, agent: int, nb: int, shown: str, version: str
    ) -> tuple[str, str, bool] | None:
        """The shared cell's source to append to, its version, and whether it is the shortened
        preview the overview showed: past 600 characters, an agent reads the cell whole half the
        time, and the other half writes the preview back (nbrelay must refuse it)."""
        cut = shown.endswith("…") or "\n… (+" in shown
        if not cut or self.rng.random() < 0.5:
            return shown, version, cut
        data = await self.call(agent, "read_cell", path=self.path(nb), cell=f"shared{nb}")
        if data is None:
            return None
        return str(data["cell"]["source"]), str(data["version"]), False

    def _preview_applied(self, edit: Edit, data: dict[str, Any] | None, preview: bool) -> None:
        if preview and data is not None:
            self.figures.silent_overwrites += 1
            self.figures.details.append(
                f"{edit.token}: a shortened preview written back as the whole source was applied"
            )

    # ----- people (live and extension modes)
    async def person(self, who: int, steps: int) -> None:
        from tests.live.person import person

        assert self.jupyter is not None
        rng = random.Random(self.rng.random())
        nb = rng.randrange(self.n_nbs)
        mine: list[str] = []
        with anyio.fail_after(120):
            async with person(self.jupyter, self.path(nb)) as p:
                for cell in p.nb.ycells:
                    key = cell_key(str(cell["source"]))
                    if key.startswith(f"P{who}b"):
                        mine.append(key)
                for _ in range(steps):
                    await anyio.sleep(rng.uniform(0.01, 0.08))
                    ids = p.ids()
                    keys = [cell_key(s) for s in p.sources()]
                    mine = [k for k in mine if k in keys]
                    action = rng.choices(
                        ["type", "shared", "new", "move", "delete"], [6, 1, 1, 1, 0.5]
                    )[0]
                    if action in ("type", "move", "delete") and not mine:
                        action = "new"
                    if action == "new":
                        key = f"P{who}b{nb}n{self.next()}"
                        cell = p.nb.create_ycell(
                            {
                                "cell_type": "code",
                                "source": f"{key}|",
                                "metadata": {},
                                "outputs": [],
                                "execution_count": None,
                                "id": secrets.token_hex(4),
                            }
                        )
                        p.nb.ycells.insert(rng.randint(0, len(ids)), cell)
                        mine.append(key)
                    elif action in ("type", "shared"):
                        key = rng.choice(mine) if action == "type" else f"Sb{nb}"
                        if key not in keys:
                            continue
                        token = f"K{who}.{self.next()}@{key};"
                        p.type_at_end(ids[keys.index(key)], token)
                        self.ledger.keystrokes[token] = Keystroke(token, key, nb, time.monotonic())
                        self.figures.keystrokes += 1
                    elif action == "move":
                        key = rng.choice(mine)
                        i = keys.index(key)
                        with p.doc.transaction():
                            content = p.nb.get_cell(i)
                            del p.nb.ycells[i]
                            p.nb.ycells.insert(
                                rng.randint(0, len(ids) - 1), p.nb.create_ycell(content)
                            )
                    else:
                        key = rng.choice(mine)
                        del p.nb.ycells[keys.index(key)]
                        mine.remove(key)
                        for k in self.ledger.keystrokes.values():
                            if k.key == key:
                                k.deleted = True
                # Stay until the server holds what this person typed.
                await self.until_saved(seconds=20)

    async def _as_person(self, who: int, steps: int) -> None:
        try:
            await self.person(who, steps)
        except (OSError, TimeoutError, httpx2.HTTPError) as exc:  # could not join the room
            self.figures.details.append(f"person {who} could not join: {exc!r}"[:300])

    async def _in_browser(self, steps: int) -> None:
        try:
            await self.browser_person(steps)
        except Exception as exc:  # the browser itself failing is reported, not counted as loss
            self.figures.details.append(f"the person in Chromium could not work: {exc!r}"[:300])

    async def browser_person(self, steps: int) -> None:
        """A person in JupyterLab in headless Chromium: their own cell (added at the end), the
        cursor at its end, a keystroke token typed key by key, again and again."""
        from playwright.async_api import async_playwright

        from nbrelay.formats import CHROMIUM_FLAGS
        from tests.live.browser import CHROMIUM, PANEL
        from tests.live.person import person

        assert self.jupyter is not None
        nb = self.rng.randrange(self.n_nbs)
        who = 90
        key = f"P{who}b{nb}n{self.next()}"
        async with person(self.jupyter, self.path(nb)) as p:
            p.nb.ycells.append(
                p.nb.create_ycell(
                    {
                        "cell_type": "code",
                        "source": f"{key}|",
                        "metadata": {},
                        "outputs": [],
                        "execution_count": None,
                        "id": secrets.token_hex(4),
                    }
                )
            )
            await anyio.sleep(0.5)
        url = f"{self.jupyter.url}lab/tree/{self.path(nb)}?reset&token={self.jupyter.token}"
        with anyio.fail_after(180):
            async with async_playwright() as pw:
                chromium = await pw.chromium.launch(
                    executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True
                )
                try:
                    page = await chromium.new_page(viewport={"width": 1280, "height": 900})
                    await page.goto(url)
                    editor = page.locator(f"{PANEL} .jp-Cell .cm-content", has_text=f"{key}|")
                    await editor.first.wait_for(timeout=90_000)
                    await editor.first.click()
                    await page.keyboard.press("Control+End")
                    for _ in range(steps):
                        token = f"K{who}.{self.next()}@{key};"
                        await page.keyboard.type(token, delay=15)
                        self.ledger.keystrokes[token] = Keystroke(token, key, nb, time.monotonic())
                        self.figures.keystrokes += 1
                    await self.until_saved(seconds=20)
                finally:
                    await chromium.close()

    # ----- outside writers
    async def rewrite(self, nb: int, *, add: bool, who: int = 0) -> None:
        """Read a notebook's file and write it back with a change, as an editor outside nbrelay
        would (in place or by replacing the file)."""
        file = self.file(nb)
        read_at = time.monotonic()
        try:
            raw = file.read_text(encoding="utf-8")
            book = nbformat.reads(raw, as_version=4)
        except (OSError, ValueError):
            return
        rng = self.rng
        added = ""
        if add:
            added = f"O{self.next()}b{nb}"
            token = f"O{who}.{self.next()}@{added};"
            cell = nbformat.v4.new_code_cell(token)
            book.cells.insert(rng.randint(0, len(book.cells)), cell)
        else:
            cells = [c for c in book.cells if cell_key(c.source) == f"Sb{nb}"]
            if not cells:
                return
            token = f"K{100 + who}.{self.next()}@Sb{nb};"
            cells[0].source += token
            self.ledger.keystrokes[token] = Keystroke(token, f"Sb{nb}", nb, time.monotonic())
            self.figures.keystrokes += 1
        text = nbformat.writes(book)
        if rng.random() < 0.5:
            tmp = file.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, file)
        else:
            file.write_text(text, encoding="utf-8")
        written_at = time.monotonic()
        if added:
            self.ledger.outside_cells[added] = written_at
        self.ledger.rewrites.append(Rewrite(nb, read_at, written_at, set(tokens_in(raw)), added))

    async def outside_writer(self, steps: int) -> None:
        for _ in range(steps):
            await anyio.sleep(self.rng.uniform(0.05, 0.3))
            await self.rewrite(self.rng.randrange(self.n_nbs), add=self.rng.random() < 0.3)

    # ----- expectations
    def expected(self) -> tuple[dict[str, set[str]], set[str]]:
        """For each cell key an agent owns, the tokens the file may hold for it (empty: the cell
        may be gone); and the tokens that must be in the shared cells and person cells."""
        allowed: dict[str, set[str]] = {}
        must: set[str] = set()
        by_key: dict[str, list[Edit]] = {}
        for e in self.ledger.edits:
            by_key.setdefault(e.key, []).append(e)
        for key, edits in by_key.items():
            if key.startswith("S"):
                continue
            acked = [e for e in edits if e.acked is not None]
            if not any(e.kind == "insert" for e in acked):
                continue
            last = max(range(len(edits)), key=lambda i: -1 if edits[i].acked is None else i)
            tail = edits[last:]
            ok = {e.token for e in tail if e.kind != "delete"}
            if tail[0].kind == "delete" or any(e.kind == "delete" for e in tail[1:]):
                ok.add("")  # deleted (acknowledged, or maybe)
            allowed[key] = ok
        return allowed, must

    async def until_saved(self, seconds: float) -> bool:
        """Wait (bounded) until every file holds what is expected of it."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.problems(final=False):
                return True
            await anyio.sleep(0.5)
        return False

    # ----- the count
    def problems(self, *, final: bool) -> list[str]:
        """What the files show wrong now (``final``: also fill in the figures)."""
        f = Figures(self.mode, 0)
        where: dict[str, list[tuple[int, str]]] = {}  # token -> (nb, host cell key)
        keys: Counter[str] = Counter()
        cells_of: dict[str, tuple[int, str]] = {}  # key -> (nb, source)
        for nb in range(self.n_nbs):
            try:
                cells = read_cells(self.file(nb))
            except (OSError, ValueError) as exc:
                return [f"n{nb} unreadable: {exc}"]
            for _, source in cells:
                key = cell_key(source)
                if key:
                    keys[key] += 1
                    cells_of[key] = (nb, source)
                    if nb_of(key) != nb:
                        f.wrong_notebook += 1
                        f.details.append(f"cell {key} in n{nb}")
                for token in tokens_in(source):
                    where.setdefault(token, []).append((nb, key))
                    if token.split("@")[1][:-1] != key:
                        f.wrong_cell += 1
                        f.details.append(f"{token} in cell {key!r} of n{nb}")
        for key, n in keys.items():
            if n > 1:
                f.duplicated_cells += n - 1
                f.details.append(f"cell {key} {n} times")
        for token, places in where.items():
            if len(places) > 1:
                f.duplicated_cells += len(places) - 1
                f.details.append(f"{token} {len(places)} times")
        named = self._named()
        # Agents' own cells.
        allowed, _ = self.expected()
        for key, ok in allowed.items():
            held = cells_of.get(key)
            there = held[1] if held else ""
            if there in ok:
                continue
            ids = {e.cell_id for e in self.ledger.edits if e.key == key and e.cell_id}
            acked = [e for e in self.ledger.edits if e.key == key and e.acked is not None]
            last = acked[-1]
            if ids & named:
                f.named_lost += 1
            elif self._outside(last, last.token):
                f.outside_overwrote += 1
            else:
                f.lost_edits += 1
                f.details.append(
                    f"{key}: file has {there!r}, last acknowledged {last.kind} {last.token!r}"
                )
        # Agents' appends to the shared cells.
        for e in self.ledger.edits:
            if e.key.startswith("S") and e.acked is not None and e.token not in where:
                later = [
                    x
                    for x in self.ledger.edits
                    if x.key == e.key
                    and x.acked is not None
                    and x.acked > e.acked
                    and e.token not in x.source
                ]
                if later:
                    continue  # replaced by a later acknowledged edit (a stale one is counted)
                if f"shared{e.nb}" in named:
                    f.named_lost += 1
                elif self._outside(e, e.token):
                    f.outside_overwrote += 1
                else:
                    f.lost_edits += 1
                    f.details.append(f"shared append {e.token} lost")
        # An edit of a shared cell applied without an append acknowledged before its read began:
        # a stale edit applied without error (the probes are counted as they happen).
        for x in self.ledger.edits:
            if x.key.startswith("S") and x.acked is not None and x.kind != "stale":
                missed = [
                    e.token
                    for e in self.ledger.edits
                    if e.key == x.key
                    and e.acked is not None
                    and e.acked < x.read_at
                    and e.token not in x.source
                    and not self._outside(e, e.token)
                ]
                if missed:
                    f.silent_overwrites += 1
                    f.details.append(
                        f"{x.token} (agent {x.agent}, read at {x.read_at:.2f}, acknowledged at "
                        f"{x.acked:.2f}) written over {missed} without error"
                    )
        # Keystrokes and outside writers' tokens.
        for k in self.ledger.keystrokes.values():
            if k.deleted or k.token in where:
                continue
            replaced = [
                x
                for x in self.ledger.edits
                if x.key == k.key
                and x.acked is not None
                and x.sent > k.at
                and k.token not in x.source
                and x.kind == "stale"
            ]
            if replaced:
                continue  # the stale edit that removed it is counted
            if any(
                r.nb == k.nb and r.read_at < k.at < r.written_at + 5 and k.token not in r.seen
                for r in self.ledger.rewrites
            ):
                f.outside_overwrote += 1
                continue
            f.lost_keystrokes += 1
            f.details.append(f"keystroke {k.token} lost")
        for key in self.ledger.outside_cells:
            if key not in keys:
                f.silent_overwrites += 1
                f.details.append(f"cell {key} written from outside vanished")
        if final:
            self.figures.lost_edits += f.lost_edits
            self.figures.duplicated_cells += f.duplicated_cells
            self.figures.wrong_cell += f.wrong_cell
            self.figures.wrong_notebook += f.wrong_notebook
            self.figures.lost_keystrokes += f.lost_keystrokes
            self.figures.silent_overwrites += f.silent_overwrites
            self.figures.named_lost += f.named_lost
            self.figures.outside_overwrote += f.outside_overwrote
            self.figures.details += f.details
        return f.details

    def _named(self) -> set[str]:
        """Cell ids nbrelay named as not applied again (every id of a notebook when it said more
        were left unlisted)."""
        out: set[str] = set()
        for _, note in self.ledger.notes:
            for part in re.split(r"The Jupyter Server stopped before saving", note):
                lost = part.split("did not apply them again", 1)
                if len(lost) == 2:
                    out |= set(re.findall(r"cell '([^']+)'", lost[1].split("Redo", 1)[0]))
                if "too many to remember" in part or re.search(r"and \d+ more", part):
                    out |= {e.cell_id for e in self.ledger.edits if e.cell_id}
                    out |= {f"shared{nb}" for nb in range(self.n_nbs)}
        return out

    def _outside(self, edit: Edit, token: str) -> bool:
        """Whether a rewrite from outside nbrelay, made from a copy read before ``edit`` was in
        the file, may have replaced it (the rewrite's own fault, not nbrelay's)."""
        # Jupyter notices a rewritten file within its poll interval; an edit made in the room
        # until then is replaced when it reloads the room from the file.
        grace = 0.0 if self.mode == "file" else 5.0
        return any(
            r.nb == edit.nb and edit.sent < r.written_at + grace and token not in r.seen
            for r in self.ledger.rewrites
        )

    def dump(self, path: Path) -> None:
        """The ledger and the files, for a look at what went wrong."""
        edits = [vars(e) for e in self.ledger.edits]
        rewrites = [{**vars(r), "seen": sorted(r.seen)} for r in self.ledger.rewrites]
        files = {self.path(nb): read_cells(self.file(nb)) for nb in range(self.n_nbs)}
        notes = self.ledger.notes
        path.write_text(
            json.dumps({"edits": edits, "rewrites": rewrites, "files": files, "notes": notes})
        )

    # ----- the run
    async def run(self, rounds: int, dump: Path | None = None) -> Figures:
        self.start()
        try:
            await self._rounds(rounds)
            if dump is not None:
                self.dump(dump)
        finally:
            await anyio.to_thread.run_sync(self.stop)
        return self.figures

    async def _rounds(self, rounds: int) -> None:
        owned: list[dict[str, tuple[int, str]]] = [{} for _ in range(self.n_agents)]
        pipes = [anyio.create_memory_object_stream[str](10) for _ in range(self.n_agents)]
        backs = [anyio.create_memory_object_stream[str](10) for _ in range(self.n_agents)]
        try:
            await self._drive(rounds, pipes, backs, owned)
        finally:
            for pair in (*pipes, *backs):
                for end in pair:
                    end.close()

    async def _drive(
        self, rounds: int, pipes: list[Any], backs: list[Any], owned: list[Any]
    ) -> None:

        async def each(command: str) -> None:
            for send, _ in pipes:
                await send.send(command)
            for _, receive in backs:
                await receive.receive()

        faults = ["SIGTERM", "kill -9"] + (["outside rewrite"] if self.mode != "file" else [])
        async with anyio.create_task_group() as tg:
            for a in range(self.n_agents):
                tg.start_soon(self.agent_loop, a, pipes[a][1], backs[a][0], owned[a])
            for r in range(rounds):
                self.figures.rounds += 1
                self.log(f"round {r + 1}/{rounds}")
                async with anyio.create_task_group() as activity:
                    activity.start_soon(each, "ops")
                    if self.mode == "file":
                        activity.start_soon(self.outside_writer, self.ops * 2)
                    else:
                        for p in range(self.n_people):
                            activity.start_soon(self._as_person, p, self.ops * 4)
                        if self.browser:
                            activity.start_soon(self._in_browser, self.ops * 2)
                # Each kind in turn (in an order of the seed's), whatever the tasks drew.
                if r % len(faults) == 0:
                    self.fault_rng.shuffle(faults)
                kind = faults[r % len(faults)]
                if kind == "outside rewrite":  # Jupyter reloads the room from the file
                    self.figures.faults["room reloaded (outside rewrite)"] += 1
                    await each("burst")
                    await self.rewrite(self.rng.randrange(self.n_nbs), add=True)
                    await anyio.sleep(3)
                else:
                    await each("burst")  # edits acknowledged, not yet saved
                    await anyio.to_thread.run_sync(self.fault, kind)
                    if self.mode in ("file", "extension"):
                        await each("reconnect")
                await each("read")  # each agent's next result names what it lost
            await each("read")
            # After saves: wait (bounded) until the files hold what they should.
            await self.until_saved(seconds=SETTLE)
            for send, _ in pipes:
                await send.send("stop")
        self.problems(final=True)


def log_to_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
