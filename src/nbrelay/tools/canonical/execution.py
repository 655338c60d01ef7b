"""Running code and reading what it printed: execute, run handles, one output in full.

Long runs send MCP progress notifications with what the cell printed (at least every 10 s) and,
past ``wait`` seconds, return a handle to poll. Cancelling the MCP request interrupts the kernel.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field, create_model

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument
from nbrelay.notebook import render
from nbrelay.notebook.address import resolve_one
from nbrelay.tools import apps, asking
from nbrelay.tools._boundary import to_result
from nbrelay.tools.arguments import NbPath, Ref, Wait
from nbrelay.tools.run_text import canonical_text
from nbrelay.tools.runs import execution_view, follow, image_content, joined_text
from nbrelay.workspace import Workspace


class OutputRead(BaseModel):
    path: str
    cell: int
    id: str
    output: int
    type: str
    mime: str
    total: int
    offset: int
    text: str | None = None
    next_offset: int | None = None
    mimes: dict[str, int] | None = None  # every format of a rich output, and its characters
    note: str | None = None


async def execute(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    ctx: Context,
    cells: Annotated[
        list[int | str] | None,
        Field(description='Index, id or "a:b"; [":"] or "all" = every cell.'),
    ] = None,
    code: Annotated[str | None, Field(description="Scratch code, not stored.")] = None,
    wait: Wait = None,
    timeout: Annotated[  # noqa: ASYNC109 - the cells' time limit, not this call's
        float | None, Field(gt=0, description="Seconds per cell.")
    ] = None,
    stop_on_error: bool = True,
    images: bool = False,
) -> Any:
    """Run cells or scratch `code` in the notebook's kernel; outputs are saved.

    Past `wait` s it returns a `handle` for get_execution and keeps running. Example: execute(path="a.ipynb", cells=["a1b2c3d4", "3:5"]).
    """
    if cells is None and code is None:
        raise InvalidArgument(
            "no cells and no code given: execute runs only what it is asked to run.",
            hint='To run every cell pass cells=[":"] (or cells="all"); some cells: '
            'cells=[0, "a1b2c3d4", "2:5"]; scratch code: code="print(1)".',
        )
    await choose_kernel(ws, caller, path)
    job = await ws.runs.execute(
        path, caller, cells, code=code, time_limit=timeout, stop_on_error=stop_on_error
    )
    await follow(ws, job, wait, ctx)
    result = execution_view(ws, job, images=images)
    if apps.wants_view(ctx):  # the notebook as the run left it, for the client's view
        ran = [c.id for c in job.cells if c.id is not None]
        going = {} if job.done.is_set() else apps.run_state([job])
        shaped = to_result(result, text=canonical_text)
        return apps.with_view(
            ctx, shaped, await ws.notebooks.read(job.path, caller), ran=ran, **going
        )
    return result


async def choose_kernel(ws: Workspace, caller: Caller, path: str) -> None:
    """A notebook that names a kernelspec this server does not have, and has no kernel running:
    ask the person which installed one to run it with, and switch the notebook to it (one undo
    step). Declined, or a client that cannot answer: nothing changes, and the run is refused as
    before, with the installed kernelspecs in its hint."""
    if not asking.can_ask():
        return
    rel = ws.notebooks.relative(path)
    if ws.kernels.kernel_info(rel) is not None:
        return
    wanted = (await ws.notebooks.read(rel, caller)).notebook.kernel_name
    _, specs = await ws.kernels.list_kernels(caller)
    names = [s.name for s in specs]
    if not wanted or not names or wanted in names:
        return
    installed: Any = Literal.__getitem__(tuple(names))  # one of the installed names
    choice: type[BaseModel] = create_model(
        "KernelChoice",
        kernel=(
            installed,
            Field(default=names[0], title="Kernel", description="An installed kernelspec."),
        ),
    )
    answer = await asking.ask(
        "kernel",
        f"{rel} asks for the kernel {wanted!r}, which is not installed here. Run it with:",
        choice,
    )
    if answer is not None and answer.accepted and answer.data is not None:
        await ws.kernels.switch_kernel(rel, caller, str(answer.data.model_dump()["kernel"]))


# Polling a run belongs with running code: --no-execute and --read-only drop it.
async def get_execution(ws: Workspace, handle: str, ctx: Context, wait: Wait = None) -> Any:
    """Poll a run by handle: waits up to `wait` s; returns only new output. Example: get_execution(handle="x1", wait=30)."""
    job = ws.runs.job(handle)
    await follow(ws, job, wait, ctx)
    return execution_view(ws, job)


async def cancel_execution(ws: Workspace, handle: str) -> Any:
    """Stop a run: interrupt its cell, skip the rest. Example: cancel_execution(handle="x1")."""
    job = ws.runs.job(handle)
    await ws.runs.cancel_job(job)
    return execution_view(ws, job)


async def read_output(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cell: Ref,
    output: Annotated[int, Field(ge=0)] = 0,
    offset: Annotated[int, Field(ge=0)] = 0,
    length: Annotated[
        int | None, Field(ge=1, description="Characters; default --output-budget.")
    ] = None,
    mime: Annotated[
        str | None, Field(description="One of its `mimes`; default the richest.")
    ] = None,
) -> Any:
    """Read an output (0-based) in slices, paging by `next_offset`; images as images.

    Offsets count stored characters. Example: read_output(path="a.ipynb", cell=3, offset=6000).
    """
    snap = await ws.notebooks.read(path, caller)
    i = resolve_one(snap.notebook.ids, cell)
    outs = snap.notebook.cells[i].get("outputs") or []
    if output >= len(outs):
        raise InvalidArgument(
            f"cell {i} has {len(outs)} output(s); output {output} does not exist.",
            hint="Outputs are numbered from 0, as read_cell shows them.",
        )
    out = outs[output]
    sizes = render.mime_sizes(out)
    if mime is not None and mime not in sizes:
        raise InvalidArgument(
            f"output {output} of cell {i} has no {mime!r} data."
            + (f" It has: {', '.join(sizes)}." if sizes else " It is not a rich output."),
            hint="Leave mime out for the default, or pass one of the output's `mimes`.",
        )
    chosen, value, clean = _stored(out, mime)
    base = OutputRead(
        path=snap.path,
        cell=i,
        id=snap.notebook.ids[i],
        output=output,
        type=str(out.get("output_type")),
        mime=chosen,
        total=0,
        offset=offset,
        mimes=sizes or None,
    )
    if chosen.startswith("image/") and chosen != "image/svg+xml":
        base.total = render.image_bytes_len(str(value))
        return (base, image_content(chosen, str(value)))
    # A slice of what is stored, made readable: the work is the slice's, whatever the size.
    size = length if length is not None else ws.settings.output_budget
    total = render.value_size(value)
    if isinstance(value, str):
        end = _whole_escapes(value, min(offset + size, total))
        text = value[offset:end]
    else:  # JSON data: encoded only up to the slice's end
        end = min(offset + size, total)
        text = render.json_head(value, end)[offset:]
    base.total, base.text = total, clean(text) if clean else text
    if end < total:
        base.next_offset = end
        picked = f", mime={mime!r}" if mime is not None else ""
        base.note = (
            f"{total - end:,} more characters: read_output(path={snap.path!r}, "
            f"cell={base.id!r}, output={output}{picked}, offset={end}) reads the next "
            f"{size:,}; a larger length reads more at once."
        )
    return base


def _stored(out: dict[str, Any], mime: str | None) -> tuple[str, Any, Any]:
    """(mime, the stored value: text or JSON data, how a slice of its text is made readable)."""
    kind = out.get("output_type")
    if kind == "stream":
        return "text/plain", joined_text(out.get("text", "")), _readable
    if kind == "error":
        return "text/plain", render.clean_traceback(out), None
    found = out.get("data")
    data: dict[str, Any] = found if isinstance(found, dict) else {}
    if mime is None:
        mime, _ = render.full_output(out)  # the default choice (image, HTML, plain text)
    value = data.get(mime, "")
    return mime, value, _readable if mime == "text/plain" and isinstance(value, str) else None


def _readable(text: str) -> str:
    return render.collapse_cr(render.strip_ansi(text))


def _whole_escapes(raw: str, end: int) -> int:
    """Move a slice's end past an ANSI escape it would split (the next slice starts clean)."""
    start = raw.rfind("\x1b", max(end - 32, 0), end)
    if start < 0:
        return end
    found = render.ANSI.match(raw, start)
    return max(end, found.end()) if found else end
