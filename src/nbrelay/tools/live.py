"""Durability on demand: in live mode an edit returns once JupyterLab has it, and the file is
saved just after; ``save_notebook`` waits until the file holds every edit so far."""

from __future__ import annotations

from pydantic import BaseModel

from nbrelay.tools._boundary import Registrar
from nbrelay.tools.arguments import NbPath
from nbrelay.workspace import Workspace


class SaveResult(BaseModel):
    path: str
    version: str
    saved: bool = True


def register(reg: Registrar, ws: Workspace) -> None:
    """Register save_notebook."""

    @reg.tool(kind="write")
    async def save_notebook(
        path: NbPath,
    ) -> SaveResult:
        """Wait until the file on disk holds every edit so far (live mode saves ~0.5 s after an
        edit); use before git or other programs read it."""
        snap = await ws.save(path)
        return SaveResult(path=snap.path, version=snap.version)
