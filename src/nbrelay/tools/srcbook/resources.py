"""Profile ``srcbook``: the session resources — state, execution history and the event
stream — and which notebook each is about (for change notifications)."""

from __future__ import annotations

import re
from typing import Any

from mcp.server.mcpserver import MCPServer

from nbrelay.caller import Caller
from nbrelay.errors import NbrelayError
from nbrelay.notebook import render
from nbrelay.tools import resources
from nbrelay.tools._boundary import Registrar, compact_json
from nbrelay.tools.srcbook.views import view
from nbrelay.workspace import Workspace
from nbrelay.workspace.srcbook_sessions import sessions_of

STATE_URI = "notebook://session/{session_id}/state"
HISTORY_URI = "notebook://session/{session_id}/history"
EVENTS_URI = "notebook://session/{session_id}/events"
_STATE_URI = re.compile(
    r"^notebook://session/([A-Za-z0-9][A-Za-z0-9_-]{0,120})/(state|history|events)$"
)


def session_of_uri(ws: Workspace, uri: str) -> str | None:
    """The notebook a ``notebook://session/{id}/...`` URI is about (for change notifications)."""
    found = _STATE_URI.match(uri)
    if found is None:
        return None
    try:
        return sessions_of(ws).path(found.group(1))
    except NbrelayError:
        return None


def register_resources(
    server: MCPServer[Any], ws: Workspace, feed: resources.ChangeFeed, reg: Registrar
) -> None:
    """Register the session resources (their errors through ``reg``'s boundary); listeners to
    them hear of the session's changes."""
    sessions = sessions_of(ws)

    @server.resource(
        STATE_URI,
        name="Notebook State",
        mime_type="application/json",
        description="Current notebook state including all cells",
    )
    @reg.resource
    async def session_state(session_id: str, caller: Caller) -> str:
        snap = await sessions.open(session_id, caller, touch=False)
        budget = render.Budget(ws.settings.output_budget, ws.settings.output_budget)
        rendered = render.render_many(snap.notebook.cells, budget)
        data = {
            **view(sessions, session_id, snap).model_dump(mode="json", exclude_none=True),
            "version": snap.version,
            "cells": [
                {
                    "cell_id": c["id"],
                    "position": i,
                    "type": c.get("cell_type"),
                    "content": c.get("source", ""),
                    **(
                        {
                            "execution_count": c.get("execution_count"),
                            "outputs": rendered[i],
                        }
                        if c.get("cell_type") == "code"
                        else {}
                    ),
                }
                for i, c in enumerate(snap.notebook.cells)
            ],
        }
        return compact_json(data)

    @server.resource(
        HISTORY_URI,
        name="Execution History",
        mime_type="application/json",
        description="Historical execution results and outputs",
    )
    @reg.resource
    async def session_history(session_id: str, caller: Caller) -> str:
        snap = await sessions.open(session_id, caller, touch=False)
        data = {"session_id": session_id, "executions": ws.runs.execution_history(snap.path)}
        return compact_json(data)

    @server.resource(
        EVENTS_URI,
        name="Events",
        mime_type="application/json",
        description="The session's events (notebook.cell.executing, notebook.cell.output, "
        "notebook.cell.completed, notebook.state.changed, notebook.error), oldest first; "
        "subscribe to hear of new ones",
    )
    @reg.resource
    async def session_events(session_id: str, caller: Caller) -> str:
        await sessions.open(session_id, caller, touch=False)
        data = {"session_id": session_id, "events": list(sessions.events.get(session_id, ()))}
        return compact_json(data)

    async def announce(entry: dict[str, Any]) -> None:
        uri = EVENTS_URI.format(session_id=entry["session_id"])
        await feed.announce(uri, {"event": entry["event"], "seq": entry["seq"]})

    sessions.listeners.append(announce)
    feed.add_alias(lambda uri: session_of_uri(ws, uri))
