"""Real kernels nobody here wrote and not built on ipykernel, through the tools as an agent calls
them: xeus-python (C++; its PyPI build exits on SIGINT, as it does under JupyterLab, and names an
error by its class's repr) and bash_kernel (another language; its errors carry no name, only the
exit status)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcp import Client

from tests.helpers import call, call_error, text_of

pytestmark = pytest.mark.anyio


async def _notebook(client: Client, path: str, kernel: str, *sources: str) -> list[str]:
    await call(client, "create_notebook", path=path, kernel=kernel)
    made = await call(client, "insert_cells", path=path, cells=list(sources))
    return [c["id"] for c in made["changed"]]


async def test_an_interrupt_that_ends_the_kernel_is_said_and_the_kernel_restarted(
    client: Client, root: Path
) -> None:
    """interrupt_kernel on a kernel that exits on SIGINT said "interrupted" (state idle) over a
    dead process; the agent's next run then began with the kernel's death. Now the interrupt's
    own result says the kernel ended and was restarted, and the next run just runs."""
    await _notebook(client, "x.ipynb", "other-xpython", "x = 41")
    ran = await client.call_tool("execute", {"path": "x.ipynb", "cells": "all"})
    assert text_of(ran).startswith("cell 0 ("), text_of(ran)
    assert "] ok" in text_of(ran)

    stopped = await call(client, "interrupt_kernel", path="x.ipynb")
    assert stopped["note"] == (
        "the kernel exited with code 0 when interrupted: it does not survive an interrupt "
        "(Ctrl-C); kernel restarted: all variables were lost"
    )
    assert stopped["kernel"]["state"] == "idle"
    assert stopped["kernel"]["restarts"] == 1

    after = await client.call_tool("execute", {"path": "x.ipynb", "code": "print(1 + 1)"})
    assert text_of(after) == "ok\n2", text_of(after)  # no death to report: it was restarted
    lost = await client.call_tool("execute", {"path": "x.ipynb", "code": "x"})
    assert "NameError" in text_of(lost)  # the restart's promise: variables were lost


async def test_the_deno_kernel_an_interrupt_ends_is_said_too(client: Client, root: Path) -> None:
    """Deno's kernel is killed by SIGINT as well, but not always at once: on a loaded machine it
    answered the kernel_info request nbrelay sends after the interrupt before it exited. Either
    way the agent is told its variables were lost before it meets their absence: by the
    interrupt's result, or else by the next run's. (Deno has also lived through it, once in a
    full run: then its variables are there, and nothing was lost to tell.)"""
    await call(client, "create_notebook", path="d.ipynb", kernel="deno")
    ran = await client.call_tool("execute", {"path": "d.ipynb", "code": "const x = 41; x + 1"})
    assert text_of(ran) == "ok\n42", text_of(ran)
    stopped = await call(client, "interrupt_kernel", path="d.ipynb")
    after = text_of(await client.call_tool("execute", {"path": "d.ipynb", "code": "typeof x"}))
    if stopped["note"] == "interrupted" and after == 'ok\n"number"':
        pass  # it lived through the interrupt: x is still defined
    elif stopped["note"] == "interrupted":  # it answered first, and exited after (or while
        # the next run was sent: that run then ends "died")
        assert "the kernel was killed by signal 2 (SIGINT)" in after, after
        assert "kernel restarted; all variables were lost" in after, after
        assert after.endswith("note: the kernel restarted, so its variables were lost"), after
    else:
        assert stopped["note"] == (
            "the kernel was killed by signal 2 (SIGINT) when interrupted: it does not survive "
            "an interrupt (Ctrl-C); kernel restarted: all variables were lost"
        )
        assert after == 'ok\n"undefined"', after


async def test_an_interrupt_a_kernel_lives_through_says_only_that(
    client: Client, root: Path
) -> None:
    await _notebook(client, "p.ipynb", "python3", "x = 41")
    await call(client, "execute", path="p.ipynb", cells="all")
    stopped = await call(client, "interrupt_kernel", path="p.ipynb")
    assert stopped["note"] == "interrupted"
    assert "restarts" not in stopped["kernel"]
    kept = await client.call_tool("execute", {"path": "p.ipynb", "code": "x + 1"})
    assert text_of(kept) == "ok\n42"


async def test_errors_read_as_a_traceback_whatever_the_kernel_calls_them(
    client: Client, root: Path
) -> None:
    """xeus-python names an error ``<class 'ZeroDivisionError'>``; the result read the
    traceback and then that line again. bash_kernel names none: the result said ``: 2``."""
    await _notebook(client, "x.ipynb", "other-xpython", "def f():\n    return 1/0\nf()")
    ran = text_of(await client.call_tool("execute", {"path": "x.ipynb", "cells": "all"}))
    assert ran.count("ZeroDivisionError: division by zero") == 1, ran
    assert "<class" not in ran
    assert "----> 3 f()" in ran

    await _notebook(client, "b.ipynb", "other-bash", "ls /no-such-folder-here")
    ran = text_of(await client.call_tool("execute", {"path": "b.ipynb", "cells": "all"}))
    lines = ran.splitlines()
    assert re.fullmatch(r"cell 0 \([\w-]+\) \[1\] error", lines[0]), ran
    assert "No such file or directory" in lines[1]
    assert lines[2] == "Error: 2", ran


async def test_markdown_and_latex_displays_read_as_written(client: Client, root: Path) -> None:
    """IPython's Markdown and Latex objects display their text with a repr as text/plain
    (``<IPython.core.display.Markdown object>``): the result showed only that repr."""
    code = (
        "from IPython.display import Latex, Markdown, display\n"
        "display(Markdown('**bold** and `code`'))\n"
        "display(Latex(r'$\\alpha^2$'))"
    )
    for kernel, path in (("python3", "p.ipynb"), ("other-xpython", "x.ipynb")):
        await _notebook(client, path, kernel, code)
        ran = text_of(await client.call_tool("execute", {"path": path, "cells": "all"}))
        assert ran.splitlines()[1:] == ["**bold** and `code`", "$\\alpha^2$"], (kernel, ran)
        listing = await call(client, "read_notebook", path=path)
        assert listing["cells"][0]["output_summary"].endswith("**bold** and `code`"), listing


async def test_python_only_tools_in_another_language_say_what_to_do_instead(
    client: Client, root: Path
) -> None:
    await _notebook(client, "b.ipynb", "other-bash", "X=42")
    await call(client, "execute", path="b.ipynb", cells="all")
    said = await call_error(client, "install_packages", path="b.ipynb", packages=["tqdm"])
    assert "install_packages needs a Python kernel; 'b.ipynb' runs 'other-bash' (bash)" in said
    assert "kernel's own package manager in a cell: execute(path='b.ipynb'" in said
    said = await call_error(client, "list_variables", path="b.ipynb")
    assert "look at its state: execute(path='b.ipynb'" in said
    said = await call_error(client, "save_kernel_state", path="b.ipynb")
    assert "re-run the cells that define them" in said
    assert (root / "b.ipynb").exists()


async def test_a_notebook_for_a_kernel_that_is_not_installed_is_refused(
    client: Client, root: Path
) -> None:
    """create_notebook took any kernel name: the notebook was written, and every run of it then
    failed. Now the name is checked first (nothing is written), and the kernelspec's own
    display name and language go into the notebook, as JupyterLab writes them."""
    said = await call_error(client, "create_notebook", path="r.ipynb", kernel="ir")
    assert "no kernelspec named 'ir' is installed (installed: " in said
    assert "other-bash" in said
    assert "list_kernels lists them" in said
    assert not (root / "r.ipynb").exists()

    await call(client, "create_notebook", path="b.ipynb", kernel="other-bash")
    meta = json.loads((root / "b.ipynb").read_text())["metadata"]
    assert meta["kernelspec"] == {"display_name": "Bash", "language": "bash", "name": "other-bash"}
    assert meta["language_info"] == {"name": "bash"}
