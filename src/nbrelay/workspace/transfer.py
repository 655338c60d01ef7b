"""Notebooks in other formats: export (HTML, PDF, Markdown, a script, …) and import (Markdown,
MyST, a script, notebook JSON), inline or as files next to the notebook (file mode; an export
as a notebook, .ipynb, is written as a notebook in every mode).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread

from nbrelay import formats
from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument, Unsupported
from nbrelay.notebook.model import Notebook, parse, utf8_text
from nbrelay.stores.base import LocalFiles, Snapshot
from nbrelay.workspace.notebooks import Notebooks


@dataclass(frozen=True)
class ExportOutcome:
    snapshot: Snapshot
    exported: formats.Exported
    saved: tuple[str, ...] = ()  # files written, relative to the root (the export first)


class Transfer:
    """Export and import of the notebooks in ``notebooks``."""

    def __init__(self, settings: Settings, notebooks: Notebooks) -> None:
        self._settings = settings
        self._notebooks = notebooks

    def _files(self, what: str) -> LocalFiles:
        files = self._notebooks.capabilities.files
        if files is None:
            raise Unsupported(
                f"{what} needs file mode (--root).",
                hint="Export without save, or import from content, and handle the file yourself.",
            )
        return files

    async def export_notebook(
        self,
        path: str,
        caller: Caller,
        fmt: str = "ipynb",
        *,
        outputs: bool = True,
        save: bool = False,
        to: str | None = None,
        overwrite: bool = False,
        image_link: formats.ImageLink | None = None,
        max_chars: int | None = None,
    ) -> ExportOutcome:
        """Convert a notebook; with ``save`` or ``to`` write it (default: next to the notebook,
        same name, the format's extension) instead of returning it inline, where a text export
        surely longer than ``max_chars`` is refused before any conversion."""
        # A notebook is written through the store (every mode); other files in file mode only.
        as_notebook = formats.export_info(fmt)[0] == ".ipynb"
        if to is not None:
            if as_notebook:
                self._notebooks.relative(to)
            else:
                self._files("saving an export").file_path(to)
        snap = await self._notebooks.read(path, caller)
        target = to
        if target is None and save and not as_notebook:
            self._files("saving an export")
        stem = posixpath.splitext(posixpath.basename(target or snap.path))[0]
        exported = await formats.export(
            snap.notebook,
            fmt,
            outputs=outputs,
            stem=stem,
            image_link=None if (save or to) else image_link,
            browser=self._settings.browser,
            time_limit=self._settings.export_timeout,
            max_chars=None if (save or to) else max_chars,
        )
        if not (save or to):
            return ExportOutcome(snap, exported)
        target = target or posixpath.splitext(snap.path)[0] + exported.extension
        if not target.endswith(exported.extension):
            raise InvalidArgument(
                f"{target!r} does not end in {exported.extension}, the {fmt} file extension.",
                hint=f'Give a path like "{posixpath.splitext(target)[0]}{exported.extension}".',
            )
        if as_notebook:
            await self._notebooks.create_from(
                target, caller, parse(exported.data, name=target), overwrite=overwrite
            )
            return ExportOutcome(snap, exported, (self._notebooks.relative(target),))
        store = self._files("saving an export")
        folder = posixpath.dirname(target)
        files = {target: exported.data}
        files.update({posixpath.join(folder, n): b for n, b in exported.files.items()})
        await store.write_files(files, overwrite=overwrite)
        return ExportOutcome(snap, exported, tuple(store.file_path(p) for p in files))

    async def import_notebook(
        self,
        path: str,
        caller: Caller,
        *,
        content: str | None = None,
        source: str | None = None,
        fmt: str = "auto",
        overwrite: bool = False,
        prepare: Callable[[Notebook], None] | None = None,
    ) -> Snapshot:
        """Create notebook ``path`` from text (``content``) or a file under the root
        (``source``) in an import format; nothing is written if the input is bad. ``prepare``
        may adjust the parsed notebook (its metadata, say) before it is written."""
        if (content is None) == (source is None):
            raise InvalidArgument(
                "give either content (the text to import) or source (a file under the root).",
            )
        self._notebooks.relative(path)
        filename = None
        if source is not None:
            filename, raw = await self._files("importing a file").read_file(source)
            content = utf8_text(
                raw, repr(filename), hint="Import text files: ipynb, Markdown, MyST or a script."
            )
        text = content or ""
        nb = await anyio.to_thread.run_sync(
            lambda: formats.import_notebook(text, fmt, filename=filename)
        )
        if prepare is not None:
            prepare(nb)
        return await self._notebooks.create_from(path, caller, nb, overwrite=overwrite)
