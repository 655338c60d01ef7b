"""The documentation: the README stays an introduction, and the MkDocs site (mkdocs.yml, docs/)
builds under ``--strict`` with every link between pages and every anchor resolved, as
``scripts/test`` builds it; a broken link or a page left out of the nav fails that build."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.helpers import missing_tool

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def _build(root: Path, site: Path) -> None:
    """``mkdocs build --strict`` of the site whose mkdocs.yml is in ``root``, in process."""
    try:
        from mkdocs.commands.build import build
        from mkdocs.config import load_config
    except ImportError:
        missing_tool("mkdocs is not installed: pip install '.[docs]' (scripts/test installs it)")
    config = load_config(str(root / "mkdocs.yml"), strict=True, site_dir=str(site))
    build(config)


def _copy_of_the_site(tmp_path: Path) -> Path:
    """The files the site is built from, in a folder of their own, to break one of them."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "docs", root / "docs")
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "docs_hooks.py", root / "scripts")
    (root / "examples").mkdir()
    shutil.copy(REPO / "examples" / "jupyterhub_config.py", root / "examples")
    for name in ("mkdocs.yml", "README.md", "CHANGELOG.md", "CONTRIBUTING.md"):
        shutil.copy(REPO / name, root)
    return root


def test_the_site_builds_strict(tmp_path: Path) -> None:
    _build(REPO, tmp_path / "site")
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*")}
    for page in ("index.html", "options/index.html", "changelog/index.html"):
        assert page in built
    assert "examples/jupyterhub_config.py" in built  # the deployment the JupyterHub page links to
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'href="tools/"' in home  # the README's links to docs/ pages point at the site's pages


@pytest.mark.parametrize(
    ("broken", "warning"),
    [
        ("[Docker](deploy/dockr.md)", "not found among documentation files"),
        ("[Docker](deploy/docker.md#no-such-part)", "does not contain an anchor"),
        ("[CONTRIBUTING](../CONTRIBUTING.md)", "not found among documentation files"),
    ],
)
def test_a_broken_link_fails_the_build(
    tmp_path: Path, broken: str, warning: str, caplog: pytest.LogCaptureFixture
) -> None:
    from mkdocs.exceptions import Abort

    root = _copy_of_the_site(tmp_path)
    page = root / "docs" / "security.md"
    page.write_text(page.read_text(encoding="utf-8") + f"\nSee {broken}.\n", encoding="utf-8")
    with pytest.raises(Abort, match="warnings in strict mode"):
        _build(root, tmp_path / "site")
    assert warning in caplog.text


def test_a_page_left_out_of_the_nav_fails_the_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mkdocs.exceptions import Abort

    root = _copy_of_the_site(tmp_path)
    (root / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    with pytest.raises(Abort, match="warnings in strict mode"):
        _build(root, tmp_path / "site")
    assert "orphan.md" in caplog.text


def test_the_readme_is_an_introduction() -> None:
    """A few hundred lines, and what is not there is a link away."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for heading in (
        "Quick start",
        "Add it to an MCP client",
        "Choose a mode",
        "Tools",
        "Read more",
    ):
        assert f"\n## {heading}\n" in text
    linked = set(re.findall(r"\]\(docs/([^)#]+)", text))
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert linked <= pages, sorted(linked - pages)
    for part in ("modes/", "deploy/", "profiles/", "security.md", "options.md", "architecture.md"):
        assert any(p.startswith(part) for p in linked), part
