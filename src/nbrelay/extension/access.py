"""Who is calling, and what Jupyter lets them do.

The MCP endpoint's handler authenticates each request the way every Jupyter API handler does
(``@web.authenticated``: the server's token, its cookie, or a JupyterHub OAuth token) and puts
the caller (the handler and its user) into the request's ASGI scope. The middleware below makes
that caller current while the MCP message is handled, and the store and kernel provider of the
extension ask Jupyter's authorizer before every operation: ``contents`` read or write for
notebooks, ``kernels`` execute for code. A request that reaches the MCP server without a caller
is refused; work the server does on its own (no request: saving a room, the change feed's
watchers of notebooks a caller already read) runs without one.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError

from nbrelay.errors import NbrelayError

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

SCOPE_KEY = "nbrelay.jupyter_caller"


class AccessDenied(NbrelayError):
    """Jupyter's authorizer refused the caller this operation."""


@dataclass(frozen=True)
class Caller:
    """An authenticated request: the Jupyter handler that received it and its user."""

    handler: Any  # jupyter_server.base.handlers.JupyterHandler
    user: Any  # jupyter_server.auth.User

    @property
    def name(self) -> str:
        for attr in ("display_name", "name", "username"):
            value = getattr(self.user, attr, None)
            if value:
                return f"the user {value!r}"
        return "this user"


current_caller: ContextVar[Caller | None] = ContextVar("nbrelay_jupyter_caller", default=None)

_WHAT = {
    ("read", "contents"): "read notebooks",
    ("write", "contents"): "change notebooks",
    ("execute", "kernels"): "run code in kernels",
    ("read", "kernels"): "see kernels",
    ("write", "kernels"): "start, restart or stop kernels",
    ("read", "kernelspecs"): "see the installed kernels",
}


async def require(action: str, resource: str) -> None:
    """Refuse the current caller ``action`` on ``resource`` unless Jupyter's authorizer allows it
    (no current caller: the server's own work, allowed)."""
    caller = current_caller.get()
    if caller is None:
        return
    authorizer = caller.handler.authorizer
    allowed: bool | Awaitable[bool] = authorizer.is_authorized(
        caller.handler, caller.user, action, resource
    )
    if inspect.isawaitable(allowed):
        allowed = await allowed
    if not allowed:
        what = _WHAT.get((action, resource), f"{action} {resource}")
        raise AccessDenied(
            f"Jupyter does not allow {caller.name} to {what} (permission {resource}:{action}); "
            "nothing was changed.",
            hint="Ask the server's administrator for the permission, or use the tools that "
            "only read.",
        )


async def caller_middleware(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """MCP middleware: make the request's Jupyter caller current while it is handled."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    caller = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    if not isinstance(caller, Caller):
        raise MCPError(-32001, "this request did not come through Jupyter's authentication.")
    token = current_caller.set(caller)
    try:
        return await call_next(ctx)
    finally:
        current_caller.reset(token)
