"""What mcp-jupyter's tools share: the workspace, the server each notebook was set up with, and
running one cell."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context

from nbrelay import jupyter_api
from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument
from nbrelay.kernels.jobs import Job
from nbrelay.notebook import render
from nbrelay.notebook.address import describe_bounds
from nbrelay.tools.mcp_jupyter.views import shown_output
from nbrelay.tools.runs import follow
from nbrelay.workspace import Workspace


@dataclass
class Served:
    """The workspace, and the server each notebook was set up with (setup_notebook's
    server_url), which check_server probes when it is given no server_url of its own."""

    ws: Workspace
    servers: dict[str, str] = field(default_factory=dict)

    @property
    def configured(self) -> str | None:
        return self.ws.settings.jupyter_url

    def budget(self) -> render.Budget:
        """The text one call may return: --output-budget per output, four times that in all."""
        limit = self.ws.settings.output_budget
        return render.Budget(limit * 4, limit)

    def served_here(self, url: str) -> bool:
        return self.configured is not None and url == jupyter_api.base_url(self.configured)

    async def run_cell(
        self, caller: Caller, path: str, index: int, ctx: Context | None
    ) -> dict[str, Any]:
        """Run the code cell at ``index`` to its end: {execution_count, outputs, status}."""
        snap = await self.ws.notebooks.read(path, caller)
        if index >= len(snap.notebook.cells):
            raise InvalidArgument(
                f"position_index={index} is out of range: {describe_bounds(len(snap.notebook.cells))}.",
                hint="View the notebook with query_notebook to see the positions.",
            )
        cell = snap.notebook.cells[index]
        if cell.get("cell_type") != "code":
            raise InvalidArgument(f"Cell at position {index} is not a code cell.")
        job: Job = await self.ws.runs.execute(path, caller, [cell["id"]])
        patience = self.ws.runs.timeout_for(None) + self.ws.settings.interrupt_grace + 10
        await follow(self.ws, job, patience, ctx)
        run = job.cells[0]
        outputs = job.cell_outputs(run)
        result: dict[str, Any] = {
            "execution_count": run.execution_count,
            "outputs": self.budget().share(
                lambda b: [
                    shown_output(dict(o), b, "the whole output is saved in the notebook")
                    for o in outputs
                ]
            ),
            "status": run.status,
        }
        if run.message:
            result["message"] = run.message
        return result
