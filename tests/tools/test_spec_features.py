"""The MCP spec features a notebook server uses, through the official client: resource links in
results, elicitation before acts a person should decide (with a client that can answer and one
that cannot), completions of resource-template arguments, icons and caching hints."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from mcp import Client
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    ElicitRequestParams,
    ElicitResult,
    ResourceLink,
    ResourceTemplateReference,
    TextResourceContents,
)

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import code, counter_ids, data_of, text_of, write_notebook
from tests.modes import Mode
from tests.services.sample import png

pytestmark = pytest.mark.anyio

LONG = "".join(f"line {i}\n" for i in range(3000))


def figures(folder: Path, name: str = "fig.ipynb") -> None:
    """A notebook with an image output (c0) and a long stream output (c1)."""
    from nbrelay.notebook.model import new_notebook

    image = {
        "output_type": "display_data",
        "data": {
            "image/png": base64.b64encode(png()).decode("ascii"),
            "text/plain": "<Figure size 640x480 with 1 Axes>",
        },
        "metadata": {},
    }
    stream = {"output_type": "stream", "name": "stdout", "text": LONG}
    nb = new_notebook([code("plot()", "c0", [image]), code("print(lines)", "c1", [stream])])
    write_notebook(folder / name, nb)


def links_of(result: CallToolResult) -> list[ResourceLink]:
    return [b for b in result.content if isinstance(b, ResourceLink)]


async def test_images_and_cut_outputs_come_with_resource_links(anymode: Mode) -> None:
    m, c = anymode, anymode.client
    figures(m.folder)
    p = m.path("fig.ipynb")
    result = await c.call_tool("read_notebook", {"path": p, "full": True})
    data = data_of(result)  # the text stays, with the same JSON as before
    assert "read_output(" in data["cells"][0]["outputs"][0]["text"]
    assert data["cells"][1]["outputs"][0]["cut"] > 0
    links = {link.uri: link for link in links_of(result)}
    base = "nbrelay://notebook/" + p
    image, text = links[f"{base}/cells/c0/outputs/0.png"], links[f"{base}/cells/c1/outputs/0"]
    assert (image.mime_type, image.size) == ("image/png", len(png()))
    assert text.mime_type == "application/json"
    # Every link can be fetched: the blob is the image, the output has its whole text.
    blob = (await c.read_resource(image.uri)).contents[0]
    assert isinstance(blob, BlobResourceContents)
    assert base64.b64decode(blob.blob) == png()
    whole = (await c.read_resource(text.uri)).contents[0]
    assert isinstance(whole, TextResourceContents)
    assert json.loads(whole.text)["text"] == LONG
    one = await c.call_tool("read_cell", {"path": p, "cell": "c0"})
    assert [link.uri for link in links_of(one)] == [image.uri]
    # A page of the output names the rest with a link to the whole of it.
    page = await c.call_tool("read_output", {"path": p, "cell": "c1", "output": 0})
    assert data_of(page)["next_offset"] > 0
    assert [link.uri for link in links_of(page)] == [text.uri]
    # Nothing to link: no link.
    assert links_of(await c.call_tool("read_notebook", {"path": p})) == []


async def _served(tmp_path: Path, profile: str = "canonical", **kw: Any) -> Client:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0, profile=profile)
    ws = Workspace(settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids())
    return Client(build_server(settings, ws), **kw)


async def test_a_saved_pdf_export_links_to_the_pdf_resource_and_profiles_keep_their_shapes(
    tmp_path: Path,
) -> None:
    figures(tmp_path / "root")
    async with await _served(tmp_path) as c:
        saved = await c.call_tool(
            "export_notebook", {"path": "fig.ipynb", "format": "pdf", "save": True}
        )
        assert data_of(saved)["saved"]
        [link] = links_of(saved)
        assert (link.uri, link.mime_type) == (
            "nbrelay://notebook/fig.ipynb/export.pdf",
            "application/pdf",
        )
        assert link.size == data_of(saved)["bytes"]
    # A compatibility profile's results stay as its original has them.
    async with await _served(tmp_path, profile="ipynb-mcp") as c:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("get_formatted_content", {"filepath": "fig.ipynb"}),
            ("get_full_output", {"filepath": "fig.ipynb", "cell_index": 2, "output_index": 1}),
        ]
        for tool, args in calls:
            result = await c.call_tool(tool, args)
            assert not result.is_error, text_of(result)
            assert links_of(result) == []


# -- elicitation ------------------------------------------------------------------------------


class Person:
    """The person behind a client that can answer forms: answers each with ``action`` (and
    ``content``), and keeps what they were asked."""

    def __init__(
        self,
        action: Literal["accept", "decline", "cancel"] = "accept",
        content: dict[str, Any] | None = None,
    ) -> None:
        self.action, self.content = action, content
        self.asked: list[str] = []
        self.schemas: list[dict[str, Any]] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        self.schemas.append(getattr(params, "requested_schema", {}))
        content = self.content if self.content is not None else {"confirm": True}
        return ElicitResult(
            action=self.action, content=content if self.action == "accept" else None
        )


def many_cells(root: Path, n: int = 8) -> None:
    from nbrelay.notebook.model import new_notebook

    write_notebook(root / "n.ipynb", new_notebook([code(f"x = {i}", f"c{i}") for i in range(n)]))


def ids_on_disk(root: Path) -> list[str]:
    return [c["id"] for c in json.loads((root / "n.ipynb").read_text())["cells"]]


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
async def test_deleting_many_cells_asks_a_client_that_can_answer(
    tmp_path: Path, client_mode: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    many_cells(root)
    no = Person("decline")
    async with await _served(tmp_path, mode=client_mode, elicitation_callback=no) as c:
        refused = await c.call_tool("delete_cells", {"path": "n.ipynb", "cells": ["0:6"]})
        assert refused.is_error
        assert "6 cells of 'n.ipynb' were not deleted (the person declined" in text_of(refused)
        assert no.asked == ["Delete 6 cells of n.ipynb? (undo can restore them)"]
        assert len(ids_on_disk(root)) == 8
        # A few cells: nobody is asked.
        data_of(await c.call_tool("delete_cells", {"path": "n.ipynb", "cells": ["0:2"]}))
        assert len(no.asked) == 1
        assert ids_on_disk(root) == [f"c{i}" for i in range(2, 8)]
    unchecked = Person("accept", {"confirm": False})
    async with await _served(tmp_path, mode=client_mode, elicitation_callback=unchecked) as c:
        refused = await c.call_tool("delete_cells", {"path": "n.ipynb", "cells": ["0:6"]})
        assert "were not deleted (the person declined" in text_of(refused)
    yes = Person("accept")
    async with await _served(tmp_path, mode=client_mode, elicitation_callback=yes) as c:
        done = data_of(await c.call_tool("delete_cells", {"path": "n.ipynb", "cells": ["0:6"]}))
        assert len(done["removed"]) == 6
        assert yes.asked == ["Delete 6 cells of n.ipynb? (undo can restore them)"]
        assert ids_on_disk(root) == []


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
async def test_a_client_that_cannot_answer_is_never_asked(tmp_path: Path, client_mode: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    many_cells(root)
    async with await _served(tmp_path, mode=client_mode) as c:  # no elicitation capability
        done = data_of(await c.call_tool("delete_cells", {"path": "n.ipynb", "cells": ["0:7"]}))
        assert len(done["removed"]) == 7
        assert ids_on_disk(root) == ["c7"]
        refused = await c.call_tool("install_packages", {"path": "n.ipynb", "packages": ["-e ."]})
        assert refused.is_error  # bad input is still refused as before


async def test_restart_and_install_ask_before_the_kernel_loses_or_gains_anything(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    many_cells(root, 1)
    person = Person("decline")
    async with await _served(tmp_path, elicitation_callback=person) as c:
        data_of(await c.call_tool("execute", {"path": "n.ipynb", "code": "x = 41"}))
        refused = await c.call_tool("restart_kernel", {"path": "n.ipynb"})
        assert "the kernel of 'n.ipynb' was not restarted (the person declined" in text_of(refused)
        assert person.asked == ["Restart the kernel of n.ipynb? Its variables will be lost."]
        kept = data_of(await c.call_tool("execute", {"path": "n.ipynb", "code": "print(x + 1)"}))
        assert kept["cells"][0]["outputs"][0]["text"] == "42\n"
        refused = await c.call_tool("install_packages", {"path": "n.ipynb", "packages": ["pip"]})
        assert "nothing was installed (pip) (the person declined" in text_of(refused)
        assert person.asked[-1] == "Install pip into the Python of n.ipynb's kernel (pip)?"
        person.action = "accept"
        installed = data_of(
            await c.call_tool("install_packages", {"path": "n.ipynb", "packages": ["pip"]})
        )
        assert installed["ok"]
        assert [p.split()[0] for p in installed["unchanged"]] == ["pip"]
        done = data_of(await c.call_tool("restart_kernel", {"path": "n.ipynb"}))
        assert done["note"] == "kernel restarted"
        lost = await c.call_tool("execute", {"path": "n.ipynb", "code": "print(x)"})
        assert "NameError" in text_of(lost)
        assert len(person.asked) == 4


async def test_a_kernelspec_that_is_not_installed_is_chosen_by_the_person(tmp_path: Path) -> None:
    from nbrelay.notebook.model import new_notebook

    root = tmp_path / "root"
    root.mkdir()
    nb = new_notebook([code("print(6 * 7)", "c0")], kernel_name="nosuchkernel")
    write_notebook(root / "k.ipynb", nb)
    run = {"path": "k.ipynb", "cells": ["c0"]}
    async with await _served(tmp_path) as c:  # cannot answer: refused as before
        refused = await c.call_tool("execute", run)
        assert "no kernelspec named 'nosuchkernel' is installed" in text_of(refused)
        assert "python3" in text_of(refused)  # the hint names the installed ones
    person = Person("decline")
    async with await _served(tmp_path, elicitation_callback=person) as c:
        refused = await c.call_tool("execute", run)
        assert "no kernelspec named 'nosuchkernel' is installed" in text_of(refused)
        assert person.asked == [
            "k.ipynb asks for the kernel 'nosuchkernel', which is not installed here. Run it with:"
        ]
        assert "python3" in person.schemas[0]["properties"]["kernel"]["enum"]
        meta = json.loads((root / "k.ipynb").read_text())["metadata"]
        assert meta["kernelspec"]["name"] == "nosuchkernel"  # nothing changed
        person.action, person.content = "accept", {"kernel": "python3"}
        done = data_of(await c.call_tool("execute", run))
        assert done["cells"][0]["outputs"][0]["text"] == "42\n"
        meta = json.loads((root / "k.ipynb").read_text())["metadata"]
        assert meta["kernelspec"]["name"] == "python3"


# -- completions, icons, caching hints --------------------------------------------------------


async def test_resource_template_arguments_complete_to_notebooks_and_cells(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    many_cells(root, 3)
    many_cells(root / "sub", 12)
    figures(root / "sub")
    cell_template = ResourceTemplateReference(uri="nbrelay://notebook/{+path}/cells/{cell}")
    async with await _served(tmp_path) as c:
        found = await c.complete(cell_template, {"name": "path", "value": "sub/"})
        assert found.completion.values == ["sub/fig.ipynb", "sub/n.ipynb"]
        every = await c.complete(cell_template, {"name": "path", "value": ""})
        assert set(every.completion.values) == {"n.ipynb", "sub/fig.ipynb", "sub/n.ipynb"}
        cells = await c.complete(
            cell_template,
            {"name": "cell", "value": "c1"},
            context_arguments={"path": "sub/n.ipynb"},
        )
        assert cells.completion.values == ["c1", "c10", "c11"]
        indexes = await c.complete(
            cell_template, {"name": "cell", "value": "1"}, context_arguments={"path": "sub/n.ipynb"}
        )
        assert indexes.completion.values == ["1", "10", "11"]
        none = await c.complete(
            cell_template, {"name": "cell", "value": ""}, context_arguments={"path": "no.ipynb"}
        )
        assert none.completion.values == []
        outside = await c.complete(cell_template, {"name": "path", "value": "../"})
        assert outside.completion.values == []


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
async def test_the_server_has_an_icon_and_its_lists_caching_hints(
    tmp_path: Path, client_mode: str
) -> None:
    async with await _served(tmp_path, mode=client_mode) as c:
        assert c.server_info is not None
        [icon] = c.server_info.icons or []
        assert icon.mime_type == "image/svg+xml"
        assert icon.src.startswith("data:image/svg+xml;base64,")
        assert base64.b64decode(icon.src.split(",", 1)[1]).startswith(b"<svg")
        if client_mode == "auto":  # the hints are 2026-07-28's
            listed = await c.session.list_tools()
            assert (listed.ttl_ms, listed.cache_scope) == (600_000, "private")
            templates = await c.session.list_resource_templates()
            assert templates.ttl_ms == 600_000
            many_cells(tmp_path / "root", 1)
            read = await c.session.read_resource("nbrelay://notebook/n.ipynb")
            assert (read.ttl_ms, read.cache_scope) == (0, "private")


# -- through the other ways in ----------------------------------------------------------------

SHOW_PNG = (
    "import base64\nfrom IPython.display import Image, display\n"
    "display(Image(data=base64.b64decode({b64!r})))"
)


async def test_a_run_that_drew_an_image_links_to_it(tmp_path: Path) -> None:
    from nbrelay.notebook.model import new_notebook

    root = tmp_path / "root"
    root.mkdir()
    source = SHOW_PNG.format(b64=base64.b64encode(png()).decode("ascii"))
    write_notebook(root / "r.ipynb", new_notebook([code(source, "c0")]))
    async with await _served(tmp_path) as c:
        ran = await c.call_tool("execute", {"path": "r.ipynb", "cells": ["c0"]})
        assert "read_output(" in data_of(ran)["cells"][0]["outputs"][0]["text"]
        [link] = links_of(ran)
        assert link.uri == "nbrelay://notebook/r.ipynb/cells/c0/outputs/0.png"
        assert link.size == len(png())
        blob = (await c.read_resource(link.uri)).contents[0]
        assert isinstance(blob, BlobResourceContents)
        assert base64.b64decode(blob.blob) == png()
        # Scratch code is not in the notebook: nothing to link.
        scratch = await c.call_tool("execute", {"path": "r.ipynb", "code": source})
        assert links_of(scratch) == []


@pytest.mark.jupyter
async def test_the_extension_asks_over_http_and_never_blocks_a_client_that_cannot_answer(
    ext_session_server: Any,
) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tests.extension.conftest import mcp_url
    from tests.servers import Folders

    server = ext_session_server
    name, folder = Folders("spec").fresh(server.root)
    many_cells(folder)
    path = f"{name}/n.ipynb"
    headers = {"Authorization": f"token {server.token}"}
    no = Person("decline")
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(
            streamable_http_client(mcp_url(server), http_client=http), elicitation_callback=no
        ) as c,
    ):
        refused = await c.call_tool("delete_cells", {"path": path, "cells": ["0:6"]})
        assert "6 cells of" in text_of(refused)
        assert "were not deleted (the person declined" in text_of(refused)
        assert no.asked == [f"Delete 6 cells of {path}? (undo can restore them)"]
        assert len(json.loads((folder / "n.ipynb").read_text())["cells"]) == 8
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(mcp_url(server), http_client=http)) as c,
    ):
        done = data_of(await c.call_tool("delete_cells", {"path": path, "cells": ["0:6"]}))
        assert len(done["removed"]) == 6


def sources_on_disk(root: Path, name: str = "m.ipynb") -> list[str]:
    return [
        c["source"] if isinstance(c["source"], str) else "".join(c["source"])
        for c in json.loads((root / name).read_text())["cells"]
    ]


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
async def test_a_conflict_with_a_persons_edit_is_settled_by_the_person(
    tmp_path: Path, client_mode: str
) -> None:
    from nbrelay.notebook.model import new_notebook

    root = tmp_path / "root"
    root.mkdir()
    person = Person()
    mine, theirs = "a = 1\nb = 200\nc = 3", "a = 1\nb = 20\nc = 3"

    async def conflict(c: Client) -> CallToolResult:
        write_notebook(root / "m.ipynb", new_notebook([code("a = 1\nb = 2\nc = 3", "c0")]))
        data_of(await c.call_tool("read_cell", {"path": "m.ipynb", "cell": "c0"}))
        nb = json.loads((root / "m.ipynb").read_text())
        nb["cells"][0]["source"] = theirs  # a person's edit, on the same line
        (root / "m.ipynb").write_text(json.dumps(nb))
        return await c.call_tool("edit_cell", {"path": "m.ipynb", "cell": "c0", "source": mine})

    async with await _served(tmp_path, mode=client_mode) as c:  # cannot answer: refused
        refused = await conflict(c)
        assert "changes the same lines" in text_of(refused)
        assert sources_on_disk(root) == [theirs]
    async with await _served(tmp_path, mode=client_mode, elicitation_callback=person) as c:
        person.action = "decline"
        refused = await conflict(c)
        assert "changes the same lines" in text_of(refused)
        assert sources_on_disk(root) == [theirs]
        assert person.asked[-1].startswith("Cell c0 of m.ipynb was changed by someone else")
        assert "+b = 20" in person.asked[-1]
        assert person.schemas[-1]["properties"]["keep"]["enum"] == ["mine", "theirs", "both"]
        person.action = "accept"
        person.content = {"keep": "theirs"}
        kept = await conflict(c)
        assert "keeps the other change (the person chose theirs)" in text_of(kept)
        assert sources_on_disk(root) == [theirs]
        person.content = {"keep": "mine"}
        data_of(await conflict(c))
        assert sources_on_disk(root) == [mine]
        person.content = {"keep": "both"}
        both = data_of(await conflict(c))
        assert sources_on_disk(root) == [theirs, mine]
        assert [x["index"] for x in both["changed"]] == [1]
        assert len(person.asked) == 4


async def test_a_person_who_does_not_answer_in_time_does_not_hold_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from nbrelay.tools import asking

    monkeypatch.setattr(asking, "ASK_SECONDS", 0.5)
    root = tmp_path / "root"
    root.mkdir()
    many_cells(root)
    asked: list[str] = []

    async def away(context: Any, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        await anyio.sleep(3)
        return ElicitResult(action="decline")

    async with await _served(tmp_path, mode="legacy", elicitation_callback=away) as c:
        done = data_of(await c.call_tool("delete_cells", {"path": "n.ipynb", "cells": ["0:6"]}))
        assert len(done["removed"]) == 6  # as before it could ask
        assert asked == ["Delete 6 cells of n.ipynb? (undo can restore them)"]
        assert ids_on_disk(root) == ["c6", "c7"]
