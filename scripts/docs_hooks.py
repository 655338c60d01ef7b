"""MkDocs hooks (mkdocs.yml): the site's home page is README.md, and CHANGELOG.md and
CONTRIBUTING.md are pages of it, each read from where it lives in the repository (one copy of
each text); their links, written for the repository (`docs/tools.md`, `CONTRIBUTING.md`), are
pointed at the site's pages. The example files the pages link to are served beside them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
PAGES = {"index.md": "README.md", "changelog.md": "CHANGELOG.md", "contributing.md": "CONTRIBUTING.md"}
SERVED = ("examples/jupyterhub_config.py",)
LINK = re.compile(r"\]\((?!https?:|#)([^)\s]+)\)")


def on_files(files: Files, config: Any) -> Files:
    for uri, name in PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / name)))
    for name in SERVED:
        files.append(File.generated(config, name, abs_src_path=str(ROOT / name)))
    return files


def _site_link(match: re.Match[str]) -> str:
    target = match.group(1)
    path, sep, anchor = target.partition("#")
    site = {name: uri for uri, name in PAGES.items()}
    path = site.get(path, path.removeprefix("docs/"))
    return f"]({path}{sep}{anchor})"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri in PAGES:
        return LINK.sub(_site_link, markdown)
    return markdown
