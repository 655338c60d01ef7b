"""Srcbook's sessions (profile ``srcbook``): notebooks that ``notebook_create`` or
``notebook_import`` made, marked in ``metadata.srcbook``, each in a working folder of its own
(``<id>/<id>.ipynb``, where its kernel runs; live mode keeps them in the root, and sessions made
before they had folders are still found there).

The registry keeps only when this server last used each session; the rest lives in the
notebooks, so sessions persist with them. Also here, what a session needs of the kernels beyond
running cells: JavaScript sessions have their cells parsed as JavaScript before they run (Deno
runs every cell as TypeScript), and with ``--persist-sessions`` a TypeScript/JavaScript session
whose kernel stopped gets its variables back by running its executed cells again, in order.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import secrets
import time
import unicodedata
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument, NbrelayError, NotebookNotFound, PathError
from nbrelay.notebook.model import Notebook
from nbrelay.stores.base import Snapshot
from nbrelay.timestamps import utc_iso
from nbrelay.workspace.facade import Workspace

DENO = "deno"
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,120}$")
SCRIPT_LANGUAGES = ("typescript", "javascript")
EVENT_LOG_DEPTH = 500  # events kept per session
# Appended to a JavaScript cell checked as a module: it can never be resolved, so the module is
# parsed (a SyntaxError if it is not JavaScript) but never runs.
_NEVER = "\n;import 'nbrelay-javascript-check:never';"


def check_id(session_id: str) -> None:
    """Refuse what is not a session id (a path, say)."""
    value: object = session_id
    if not isinstance(value, str) or not SESSION_ID.match(session_id):
        raise InvalidArgument(
            f"{session_id!r} is not a session id.",
            hint="Session ids come from notebook_create or notebook_import; notebook_list "
            "shows them.",
        )


def session_meta(nb: Notebook) -> Any:
    """The notebook's ``metadata.srcbook`` (a dict for a session)."""
    return (nb.data.get("metadata") or {}).get("srcbook")


def kernelspec(language: str) -> dict[str, str]:
    return {"name": DENO, "display_name": "Deno", "language": language}


@dataclass
class Sessions:
    """When each session was last used by this server (the rest lives in the notebooks)."""

    ws: Workspace
    used: dict[str, float] = field(default_factory=dict)
    events: dict[str, deque[dict[str, Any]]] = field(default_factory=dict)
    _sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    listeners: list[Callable[[dict[str, Any]], Awaitable[None]]] = field(default_factory=list)

    async def record(self, event: dict[str, Any]) -> None:
        """Keep an event (``{"event": ..., "session_id": ...}``) in its session's log, the
        resource ``notebook://session/{id}/events``, numbered in the order they happened, and
        tell the listeners."""
        log = self.events.setdefault(str(event["session_id"]), deque(maxlen=EVENT_LOG_DEPTH))
        entry = {"seq": next(self._sequence), "at": utc_iso(time.time()), **event}
        log.append(entry)
        for listener in self.listeners:
            await listener(entry)

    @property
    def own_folders(self) -> bool:
        """Whether each session gets a working folder of its own (file mode: its kernel runs
        there, and a sandbox shows it that folder alone); in live mode sessions are notebooks
        at the top of the Jupyter Server's root."""
        return self.ws.capabilities.files is not None

    def path(self, session_id: str) -> str:
        """Where a new session's notebook goes: ``<id>/<id>.ipynb`` (its own folder) in file
        mode, ``<id>.ipynb`` in live mode."""
        check_id(session_id)
        if self.own_folders:
            return self.ws.notebooks.relative(f"{session_id}/{session_id}.ipynb")
        return self.ws.notebooks.relative(session_id + ".ipynb")

    async def open(self, session_id: str, caller: Caller, *, touch: bool = True) -> Snapshot:
        """The session's notebook (``touch`` marks it used, resuming a suspended session); a
        session made before sessions had folders of their own is found in the root."""
        snap: Snapshot | None = None
        check_id(session_id)
        places = [f"{session_id}/{session_id}.ipynb"] if self.own_folders else []
        for place in [*places, session_id + ".ipynb"]:
            try:
                snap = await self.ws.notebooks.read(self.ws.notebooks.relative(place), caller)
            except (NotebookNotFound, PathError):  # a link that leads elsewhere is no session
                continue
            if isinstance(session_meta(snap.notebook), dict):
                break
        if snap is None or not isinstance(session_meta(snap.notebook), dict):
            raise InvalidArgument(
                f"no session has id {session_id!r}.",
                hint='notebook_list(filter="all") lists the sessions; notebook_create starts one.',
            )
        if touch:
            self.used[session_id] = time.time()
        return snap

    def running(self, path: str) -> bool:
        """Whether the session's kernel runs now (not stopped, suspended or dead)."""
        info = self.ws.kernels.kernel_info(path)
        return info is not None and info.state not in ("suspended", "dead")

    def active(self, session_id: str, path: str) -> bool:
        if self.ws.kernels.kernel_info(path) is not None:
            return True
        last = self.used.get(session_id)
        idle = self.ws.settings.kernel_idle_timeout
        return last is not None and (idle <= 0 or time.time() - last < idle)

    def language(self, snap: Snapshot) -> str:
        meta = session_meta(snap.notebook) or {}
        return str(meta.get("language") or snap.notebook.language or "typescript").lower()

    async def all(self, caller: Caller) -> list[tuple[str, Snapshot]]:
        entries = await self.ws.notebooks.list_notebooks("", caller, recursive=False)
        if self.own_folders:
            entries += await self.ws.notebooks.list_notebooks("", caller, pattern="*/*.ipynb")
        found: dict[str, Snapshot] = {}
        for entry in entries:
            session_id = entry.path.rsplit("/", 1)[-1][: -len(".ipynb")]
            folder, _, _ = entry.path.rpartition("/")
            if folder not in ("", session_id) or not SESSION_ID.match(session_id):
                continue
            try:
                snap = await self.ws.notebooks.read(entry.path, caller)
            except NbrelayError:
                continue
            is_session = isinstance(session_meta(snap.notebook), dict)
            if is_session and (session_id not in found or folder):  # its own folder wins
                found[session_id] = snap
        return sorted(found.items())

    async def remove_folder(self, path: str) -> None:
        """After a session's notebook is deleted: delete its working folder and everything its
        cells left there (a session kept in the root has none)."""
        files = self.ws.capabilities.files
        folder = path.rpartition("/")[0]
        if files is not None and folder:
            await files.remove_tree(folder)

    def check_room(self, session_id: str) -> None:
        """Refuse a new session when ``--max-sessions`` (``maxSessions``) kernels run: the
        workspace's one count of kernel slots, which also refuses a kernel past it."""
        self.ws.kernels.check_session_room(self.path(session_id))

    def new_id(self, name: str) -> str:
        plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
        slug = re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")[:40].strip("-")
        return f"{slug or 'notebook'}-{secrets.token_hex(3)}"

    # -- what sessions need of their kernels -----------------------------------------------

    async def javascript_error(self, path: str, caller: Caller, source: str) -> str | None:
        """Why ``source`` is not JavaScript (a SyntaxError's message), or None if it parses.
        Deno's kernel compiles every cell as TypeScript; here the cell is parsed as a
        JavaScript module in the session's kernel (a ``data:`` import that can never link, so
        nothing of it runs). Modules are strict, as Deno's kernel runs cells."""
        encoded = base64.b64encode((source + _NEVER).encode("utf-8")).decode("ascii")
        url = f"data:application/javascript;base64,{encoded}"
        expression = (
            f"import({json.dumps(url)}).then(() => null, (e) => "
            "/SyntaxError/.test(String(e)) ? String(e.message ?? e) : null)"
        )
        found = await self.ws.inspect.evaluate_json(path, caller, expression)
        if not isinstance(found, str):
            return None
        lines = [line for line in found.replace(url, "cell").splitlines() if line.strip()]
        return "\n".join(line for line in lines if not line.strip().startswith("at cell"))

    async def start_kernel(
        self, path: str, caller: Caller, snap: Snapshot, time_limit: float, *, replay: bool
    ) -> list[str]:
        """Before a run in a session whose kernel is not running: apply its ``tsconfig``'s JSX
        options to the new kernel, then (``replay``) restore its variables. What was done, for
        the result's note."""
        if self.running(path):
            return []
        pragmas = jsx_pragmas(session_meta(snap.notebook) or {})
        if pragmas and self.language(snap) == "typescript":
            job = await self.ws.runs.execute(
                path, caller, code=pragmas + "\nundefined", time_limit=time_limit
            )
            await self.ws.runs.wait_job(job, time_limit + 60, None)
        said = await self.replay(path, caller, snap, time_limit) if replay else None
        return [said] if said else []

    async def replay(
        self, path: str, caller: Caller, snap: Snapshot, time_limit: float
    ) -> str | None:
        """With ``--persist-sessions``, give a TypeScript/JavaScript session whose kernel had
        stopped its variables back: run the cells it had executed again, in the order of
        their execution counts (Deno's variables cannot be saved like Python's). Returns what
        was done, for the result's note; None when there was nothing to do."""
        if not self.ws.settings.persist_sessions:
            return None
        if self.language(snap) not in SCRIPT_LANGUAGES:
            return None  # Python sessions are saved and restored by the workspace
        ran = [
            (cell["execution_count"], cell["id"])
            for cell in snap.notebook.cells
            if cell.get("cell_type") == "code" and isinstance(cell.get("execution_count"), int)
        ]
        if not ran:
            return None
        ids = [cell_id for _, cell_id in sorted(ran)]
        job = await self.ws.runs.execute(
            path, caller, ids, time_limit=time_limit, stop_on_error=False
        )
        await self.ws.runs.wait_job(job, time_limit * len(ids) + 60, None)
        if not job.done.is_set():
            await self.ws.runs.cancel_job(job)
        failed = [c.id for c in job.cells if c.status != "ok"]
        said = (
            f"the session's kernel had stopped, so its {len(ids)} executed cell(s) were run "
            "again, in order, to restore its variables"
        )
        return said + (
            f" ({len(failed)} did not end ok: {', '.join(map(str, failed))})" if failed else ""
        )


# The tsconfig compiler options Deno's kernel can apply: its REPL does not type-check, and of
# its compiler options it honours only the JSX transform, which pragmas set for the session.
JSX_OPTIONS = ("jsx", "jsxFactory", "jsxFragmentFactory", "jsxImportSource")
_PRAGMA_VALUE = re.compile(r"^[A-Za-z_$@][\w$./@:-]{0,200}$")


def compiler_options(meta: dict[str, Any]) -> dict[str, Any]:
    """A session's tsconfig compiler options (``{"compilerOptions": {...}}`` or the options)."""
    tsconfig = meta.get("tsconfig")
    if not isinstance(tsconfig, dict):
        return {}
    inner = tsconfig.get("compilerOptions")
    return inner if isinstance(inner, dict) else tsconfig


def check_tsconfig(tsconfig: dict[str, Any]) -> None:
    """Refuse JSX options Deno could not take (before the session is made)."""
    options = compiler_options({"tsconfig": tsconfig})
    for key in JSX_OPTIONS:
        value = options.get(key)
        if value is not None and not (isinstance(value, str) and _PRAGMA_VALUE.match(value)):
            raise InvalidArgument(
                f"tsconfig {key} = {value!r} is not a name or module specifier.",
                hint='For example {"jsx": "react", "jsxFactory": "h"} or '
                '{"jsx": "react-jsx", "jsxImportSource": "npm:preact"}.',
            )
    if options.get("jsx") not in (None, "react", "react-jsx", "react-jsxdev", "precompile"):
        raise InvalidArgument(
            f"tsconfig jsx = {options.get('jsx')!r} is not a JSX mode Deno's kernel runs.",
            hint='Use "react" (with jsxFactory), "react-jsx" or "precompile" (with '
            "jsxImportSource).",
        )


def jsx_pragmas(meta: dict[str, Any]) -> str:
    """The JSX pragmas that give a session's kernel its tsconfig's JSX options ("" if none)."""
    options = compiler_options(meta)
    lines = []
    automatic = options.get("jsx") in ("react-jsx", "react-jsxdev", "precompile")
    if automatic or options.get("jsxImportSource"):
        lines.append(f"/** @jsxImportSource {options.get('jsxImportSource') or 'react'} */")
    else:
        if options.get("jsxFactory"):
            lines.append(f"/** @jsx {options['jsxFactory']} */")
        if options.get("jsxFragmentFactory"):
            lines.append(f"/** @jsxFrag {options['jsxFragmentFactory']} */")
    return "\n".join(lines)


def tsconfig_note(tsconfig: dict[str, Any]) -> str:
    """What of a tsconfig applies, for notebook_create's result."""
    options = compiler_options({"tsconfig": tsconfig})
    used = [k for k in JSX_OPTIONS if k in options]
    rest = [k for k in options if k not in JSX_OPTIONS]
    said = "tsconfig is kept with the notebook"
    if used:
        said += f"; Deno's kernel applies {', '.join(used)} (the JSX transform)"
    if rest:
        said += (
            "; Deno runs TypeScript without type-checking it, so these change nothing: "
            + ", ".join(rest)
        )
    return said


def sessions_of(ws: Workspace) -> Sessions:
    """The session registry of a workspace (attached to it), shared by the tools and the
    resources."""
    return ws.attached(Sessions, Sessions)


def prepare_import(name: str) -> Callable[[Notebook], None]:
    """Mark an imported notebook as a session; TypeScript, JavaScript and notebooks that name
    no language run on Deno, other languages (Python) keep their kernel."""

    def apply(nb: Notebook) -> None:
        meta = nb.data.setdefault("metadata", {})
        old = meta.get("srcbook") if isinstance(meta.get("srcbook"), dict) else {}
        has_code = any(c.get("cell_type") == "code" for c in nb.cells)
        found = nb.language if has_code else None  # text alone names no language
        language = str(old.get("language") or found or "typescript").lower()
        if language in ("typescript", "javascript", "ts", "js"):
            language = "javascript" if language in ("javascript", "js") else "typescript"
            meta["kernelspec"] = kernelspec(language)
            meta["language_info"] = {"name": language}
            for cell in nb.cells:
                if cell.get("cell_type") == "code":
                    cell["source"] = _without_script_magic(cell.get("source", ""))
        meta["srcbook"] = {
            **old,
            "name": old.get("name") or name,
            "language": language,
            "created": utc_iso(time.time()),
        }

    return apply


# The cell magic jupytext writes for a code block in another language than the notebook's
# (```javascript in a TypeScript notebook becomes "%%javascript"): Deno cannot run it, and
# the block's code is TypeScript/JavaScript that Deno runs as it is.
_SCRIPT_MAGIC = re.compile(r"\A%%(?:javascript|js|typescript|ts)[ \t]*(?:\n|\Z)")


def _without_script_magic(source: Any) -> Any:
    text = "".join(source) if isinstance(source, list) else source
    if not isinstance(text, str) or not _SCRIPT_MAGIC.match(text):
        return source
    return _SCRIPT_MAGIC.sub("", text, count=1)


def import_name(content: str, fmt: str) -> str:
    """The name an imported notebook is known by: its Srcbook name, else its first heading."""
    lines: list[str] = content.splitlines()
    if fmt in ("json", "ipynb"):
        try:
            data = json.loads(content)
        except ValueError:
            data = None  # the import itself explains what is wrong
        if isinstance(data, dict):
            meta = data.get("metadata")
            srcbook = meta.get("srcbook") if isinstance(meta, dict) else None
            if isinstance(srcbook, dict) and isinstance(srcbook.get("name"), str):
                return str(srcbook["name"])
            lines = []
            for cell in data.get("cells") or []:
                if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
                    source = cell.get("source", "")
                    text = "".join(source) if isinstance(source, list) else str(source)
                    lines += text.split("\n")
    heading = next((s.lstrip("#").strip() for s in lines if s.startswith("#")), "")
    return heading[:80] or "Imported notebook"
