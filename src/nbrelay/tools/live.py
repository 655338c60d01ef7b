"""Durability on demand: in live mode an edit returns once JupyterLab has it, and the file is
saved just after; ``save_notebook`` waits until the file holds every edit so far."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from nbrelay.tools._boundary import Registrar
from nbrelay.workspace import Workspace


class SaveResult(BaseModel):
    path: str
    version: str
    saved: bool = True


def register(reg: Registrar, ws: Workspace) -> None:
    """Register save_notebook."""

    @reg.tool(kind="write")
    async def save_notebook(
        path: Annotated[str, Field(description="Notebook path relative to the root.")],
    ) -> SaveResult:
        """Wait until the notebook's .ipynb file holds every edit made so far, then return.

        Live mode saves about 0.5 s after the last edit; call this before something reads the
        file (git, nbconvert, another program). File mode writes before each edit returns.
        Example: save_notebook(path="eda.ipynb").
        """
        snap = await ws.save(path)
        return SaveResult(path=snap.path, version=snap.version)
