"""Notebook resources: the same content as the tools, images as blobs, confined to the root."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import BlobResourceContents, TextResourceContents

from tests.helpers import call
from tests.services.sample import png

pytestmark = pytest.mark.anyio

NB = "nbrelay://notebook/report.ipynb"


async def read_json(client: Client, uri: str) -> dict[str, Any]:
    result = await client.read_resource(uri)
    content = result.contents[0]
    assert isinstance(content, TextResourceContents)
    assert content.mime_type == "application/json"
    data: dict[str, Any] = json.loads(content.text)
    return data


async def test_templates_are_listed(client: Client) -> None:
    templates = {
        t.uri_template for t in (await client.list_resource_templates()).resource_templates
    }
    assert {
        "nbrelay://notebook/{+path}",
        "nbrelay://notebook/{+path}/cells/{cell}",
        "nbrelay://notebook/{+path}/cells/{cell}/outputs/{output}",
        "nbrelay://notebook/{+path}/cells/{cell}/outputs/{output}.png",
        "nbrelay://notebook/{+path}/changes{?since}",
        "nbrelay://notebook/{+path}/export.pdf",
    } <= templates


async def test_notebook_and_cell_resources_equal_the_tool_results(client: Client) -> None:
    assert await read_json(client, NB) == await call(client, "read_notebook", path="report.ipynb")
    for ref in ("c1", "2", "c3", "m0"):
        tool = await call(client, "read_cell", path="report.ipynb", cell=ref)
        assert await read_json(client, f"{NB}/cells/{ref}") == tool


async def test_an_output_resource_has_the_whole_text(client: Client, served: Path) -> None:
    long_text = "".join(f"line {i}\n" for i in range(3000))
    await call(client, "insert_cells", path="report.ipynb", cells=["print(lines)"])
    nb = json.loads((served / "report.ipynb").read_text())
    nb["cells"][-1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": long_text}]
    (served / "report.ipynb").write_text(json.dumps(nb))
    cell = await call(client, "read_cell", path="report.ipynb", cell=-1)
    assert cell["cell"]["outputs"][0]["cut"] > 0  # the tool cuts it within the budget
    cid = cell["cell"]["id"]
    out = await read_json(client, f"{NB}/cells/{cid}/outputs/0")
    assert out["text"] == long_text
    assert (out["type"], out["name"], out["id"]) == ("stream", "stdout", cid)
    small = await read_json(client, f"{NB}/cells/c1/outputs/0")
    tool = await call(client, "read_cell", path="report.ipynb", cell="c1")
    assert small["text"] == tool["cell"]["outputs"][0]["text"] == "total is 42\n"


async def test_an_image_output_is_a_blob_resource(client: Client) -> None:
    out = await read_json(client, f"{NB}/cells/c2/outputs/0")
    assert out["images"] == {"image/png": f"{NB}/cells/c2/outputs/0.png"}
    blob = (await client.read_resource(out["images"]["image/png"])).contents[0]
    assert isinstance(blob, BlobResourceContents)
    assert blob.mime_type == "image/png"
    assert base64.b64decode(blob.blob) == png()
    with pytest.raises(MCPError, match="has no image/jpeg data"):
        await client.read_resource(f"{NB}/cells/c2/outputs/0.jpeg")
    with pytest.raises(MCPError, match="there is no output 5"):
        await client.read_resource(f"{NB}/cells/c2/outputs/5")


async def test_a_pdf_resource(client: Client) -> None:
    blob = (await client.read_resource(f"{NB}/export.pdf")).contents[0]
    assert isinstance(blob, BlobResourceContents)
    assert blob.mime_type == "application/pdf"
    assert base64.b64decode(blob.blob).startswith(b"%PDF")


@pytest.mark.parametrize(
    "uri",
    [
        "nbrelay://notebook/../secret.ipynb",
        "nbrelay://notebook/a/../../secret.ipynb",
        "nbrelay://notebook/%2e%2e/secret.ipynb",
        "nbrelay://notebook//etc/secret.ipynb",
        "nbrelay://notebook/.hidden/secret.ipynb",
        "nbrelay://notebook/link.ipynb",
        "nbrelay://notebook/../secret.ipynb/cells/0",
        "nbrelay://notebook/.hidden/secret.ipynb/cells/0/outputs/0.png",
        "nbrelay://notebook/%2e%2e%2fsecret.ipynb/changes",
    ],
)
async def test_resources_are_confined_to_the_root(client: Client, served: Path, uri: str) -> None:
    secret = served.parent / "secret.ipynb"
    secret.write_text((served / "report.ipynb").read_text().replace("Quarterly", "CANARY"))
    (served / ".hidden").mkdir(exist_ok=True)
    (served / ".hidden" / "secret.ipynb").write_text(secret.read_text())
    link = served / "link.ipynb"
    if not link.exists():
        link.symlink_to(secret)
    with pytest.raises(MCPError) as info:
        await client.read_resource(uri)
    assert "CANARY" not in str(info.value)


async def test_a_missing_notebook_or_cell_is_a_clear_error(client: Client) -> None:
    with pytest.raises(MCPError, match="does not exist"):
        await client.read_resource("nbrelay://notebook/nope.ipynb")
    with pytest.raises(MCPError, match="no cell has id 'zz'"):
        await client.read_resource(f"{NB}/cells/zz")
