"""A release names one version everywhere, and the Claude Desktop bundle's manifest starts the
real server on the folder the user chose (``scripts/bundle`` builds, validates and starts the
bundle itself)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from mcp import Client, StdioServerParameters

from nbrelay import __version__
from nbrelay.config import OPTIONS
from tests.helpers import call

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "mcpb"


def _manifest() -> dict[str, Any]:
    return json.loads((BUNDLE / "manifest.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _releases() -> list[str]:
    """The version headings of CHANGELOG.md, newest first (``Unreleased`` included)."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return re.findall(r"^## \[([^\]]+)\]", text, flags=re.MULTILINE)


def test_every_file_names_the_packages_version() -> None:
    server = json.loads((ROOT / "server.json").read_text(encoding="utf-8"))
    assert server["version"] == __version__
    assert {p["version"] for p in server["packages"]} == {__version__}
    assert _manifest()["version"] == __version__
    releases = _releases()
    assert releases[0] == "Unreleased"
    assert releases[1] == __version__, "CHANGELOG.md's newest release is not the package's version"


def test_changelog_releases_are_dated_and_sectioned() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    dated = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, flags=re.MULTILINE)
    assert [v for v, _ in dated] == _releases()[1:]
    sections = set(re.findall(r"^### (\w+)$", text, flags=re.MULTILINE))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_bundle_runs_its_entry_point_with_the_chosen_folder() -> None:
    manifest = _manifest()
    server = manifest["server"]
    assert manifest["manifest_version"] == "0.4"
    assert server["type"] == "uv"
    assert (BUNDLE / server["entry_point"]).is_file()
    config = server["mcp_config"]
    assert config["command"] == "uv"
    assert config["args"][-1] == server["entry_point"]
    assert "--frozen" in config["args"]  # the versions the bundle's uv.lock pins, nothing newer
    # The folder is the user's choice, handed over as the root option's environment variable.
    root = next(o for o in OPTIONS if o.name == "root")
    assert config["env"] == {root.env: "${user_config.root}"}
    assert manifest["user_config"] == {
        "root": {
            "type": "directory",
            "title": "Notebook folder",
            "description": manifest["user_config"]["root"]["description"],
            "required": True,
            "default": "${DOCUMENTS}",
        }
    }
    used = set(re.findall(r"\$\{user_config\.(\w+)\}", json.dumps(config)))
    assert used == set(manifest["user_config"])


async def test_the_bundles_entry_point_serves_the_chosen_folder(tmp_path: Path) -> None:
    """mcpb/server/main.py, run as the manifest runs it (without uv: this environment already
    holds nbrelay), serves the folder named by the manifest's environment over stdio."""
    chosen, elsewhere = tmp_path / "chosen", tmp_path / "elsewhere"
    chosen.mkdir()
    elsewhere.mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    (chosen / "mine.ipynb").write_text(nbformat.writes(notebook), encoding="utf-8")
    (elsewhere / "other.ipynb").write_text(nbformat.writes(notebook), encoding="utf-8")
    env = {
        k: v.replace("${user_config.root}", str(chosen))
        for k, v in _manifest()["server"]["mcp_config"]["env"].items()
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(BUNDLE / _manifest()["server"]["entry_point"])],
        env=env,
        cwd=elsewhere,
    )
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"read_notebook", "execute", "list_notebooks"} <= names
        listed = json.dumps(await call(client, "list_notebooks"))
        assert "mine.ipynb" in listed
        assert "other.ipynb" not in listed
        created = await call(client, "create_notebook", path="new.ipynb")
        assert created["path"] == "new.ipynb"
    assert (chosen / "new.ipynb").is_file()
    assert not (elsewhere / "new.ipynb").exists()
