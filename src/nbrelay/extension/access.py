"""Who is calling, and what Jupyter lets them do.

The MCP endpoint's handler authenticates each request the way every Jupyter API handler does
(``@web.authenticated``: the server's token, its cookie, or a JupyterHub OAuth token) and puts
who it authenticated (the handler and its user: ``JupyterUser``) into the request's ASGI scope;
the tool boundary puts it in the call's ``Caller`` (``Caller.jupyter``), which is passed down as
an argument, and the store and kernel provider of the extension ask Jupyter's authorizer about
the caller each operation is handed before doing it (``require``): ``contents`` read or write for
notebooks and files, ``kernels`` execute for code. A request that reaches the MCP server without
Jupyter's authentication is refused (the middleware below), and so is an operation whose caller
carries no Jupyter identity, unless it is the server's own work, which names itself
(``Caller.server``: the change feed's polling of notebooks a client listens to, stopping idle
kernels, resuming runs after a restart).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError

from nbrelay.caller import JUPYTER_SCOPE_KEY, Caller
from nbrelay.errors import AccessDenied

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext


@dataclass(frozen=True)
class JupyterUser:
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


_WHAT = {
    ("read", "contents"): "read notebooks",
    ("write", "contents"): "change notebooks",
    ("execute", "kernels"): "run code in kernels",
    ("read", "kernels"): "see kernels",
    ("write", "kernels"): "start, restart or stop kernels",
    ("read", "kernelspecs"): "see the installed kernels",
}


async def require(caller: Caller, action: str, resource: str) -> None:
    """Refuse ``caller`` ``action`` on ``resource`` unless Jupyter's authorizer allows it (the
    server's own work is allowed; a caller with no Jupyter identity is refused)."""
    user = caller.jupyter
    if not isinstance(user, JupyterUser):
        if caller.is_server:
            return
        raise AccessDenied(
            f"this operation ({resource}:{action}) was reached without the Jupyter user it is "
            "done for, so it is refused; nothing was changed.",
            hint="Call nbrelay through Jupyter's /mcp endpoint with Jupyter's credentials (its "
            "token or login cookie).",
        )
    authorizer = user.handler.authorizer
    allowed: bool | Awaitable[bool] = authorizer.is_authorized(
        user.handler, user.user, action, resource
    )
    if inspect.isawaitable(allowed):
        allowed = await allowed
    if not allowed:
        what = _WHAT.get((action, resource), f"{action} {resource}")
        raise AccessDenied(
            f"Jupyter does not allow {user.name} to {what} (permission {resource}:{action}); "
            "nothing was changed.",
            hint="Ask the server's administrator for the permission, or use the tools that "
            "only read.",
        )


async def caller_middleware(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """MCP middleware: refuse a request that did not come through Jupyter's authentication (the
    tool boundary reads who it did from the request's scope)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    user = scope.get(JUPYTER_SCOPE_KEY) if isinstance(scope, dict) else None
    if not isinstance(user, JupyterUser):
        raise MCPError(-32001, "this request did not come through Jupyter's authentication.")
    return await call_next(ctx)
