"""The REST side of a remote server's kernels: kernelspecs, sessions and kernels (start, look
up, interrupt, restart, delete) through the Jupyter Server's ``api/kernelspecs``,
``api/sessions`` and ``api/kernels``, and the envelope of a request sent on a kernel's
WebSocket. ``remote.py`` holds the sessions that use them.
"""

from __future__ import annotations

import posixpath
import time
import uuid
from collections.abc import Mapping
from typing import Any

from nbrelay.errors import KernelError, NbrelayError, NotebookNotFound
from nbrelay.jupyter_api import JupyterAPI, api_path
from nbrelay.kernels.base import KernelSpecInfo, specs_by_name
from nbrelay.timestamps import utc_iso


async def kernelspecs(api: JupyterAPI) -> dict[str, KernelSpecInfo]:
    """The server's kernelspecs by name."""
    resp = await api.request("GET", "api/kernelspecs", ok=(200,), what="kernelspecs")
    body = resp.body if isinstance(resp.body, dict) else {}
    return specs_by_name(body.get("kernelspecs"))


async def kernel_model(api: JupyterAPI, kernel_id: str) -> dict[str, Any] | None:
    """The server's model of a kernel, or None when it has no such kernel."""
    try:
        resp = await api.request(
            "GET", api_path("api/kernels", kernel_id), ok=(200,), what="the kernel"
        )
    except NotebookNotFound:
        return None
    return resp.body if isinstance(resp.body, dict) else {}


async def find_session(api: JupyterAPI, path: str) -> dict[str, Any] | None:
    """The session the server has for a notebook path (with a kernel), or None; raises
    ``NotebookNotFound`` when the server has no sessions API (a kernel gateway)."""
    resp = await api.request("GET", "api/sessions", ok=(200,), what="the sessions API")
    for model in resp.body if isinstance(resp.body, list) else []:
        if isinstance(model, dict) and model.get("path") == path and model.get("kernel"):
            return model
    return None


async def start_session(api: JupyterAPI, key: str, path: str, kernel_name: str) -> dict[str, Any]:
    """Start a session (and its kernel) for notebook ``path``; its model."""
    body = {
        "path": path,
        "name": posixpath.basename(path),
        "type": "notebook",
        "kernel": {"name": kernel_name},
    }
    failed = f"the Jupyter Server could not start a {kernel_name} kernel for {key!r}"
    return await _start(api, "api/sessions", body, "a session", failed)


async def start_kernel(api: JupyterAPI, kernel_name: str) -> dict[str, Any]:
    """Start a kernel without a session (a gateway); its model."""
    failed = f"the kernel server could not start a {kernel_name} kernel"
    return await _start(api, "api/kernels", {"name": kernel_name}, "a kernel", failed)


async def _start(
    api: JupyterAPI, path: str, body: dict[str, Any], what: str, failed: str
) -> dict[str, Any]:
    """POST ``body`` to ``path`` (a session or kernel to start); its model, or a ``KernelError``
    that begins with ``failed``."""
    try:
        resp = await api.request("POST", path, body=body, ok=(200, 201), what=what)
    except NbrelayError as exc:
        raise KernelError(f"{failed}: {exc.message}", hint=exc.raw_hint) from exc
    return resp.body if isinstance(resp.body, dict) else {}


async def interrupt(api: JupyterAPI, kernel_id: str, name: str) -> None:
    try:
        await api.request(
            "POST", api_path("api/kernels", kernel_id, "interrupt"), what="the kernel"
        )
    except NbrelayError as exc:
        raise KernelError(
            f"could not interrupt the {name} kernel: {exc.raw_message}", hint=exc.raw_hint
        ) from exc


async def restart(api: JupyterAPI, kernel_id: str) -> None:
    """Ask the server to restart a kernel (``NotebookNotFound``: it has no such kernel)."""
    await api.request(
        "POST", api_path("api/kernels", kernel_id, "restart"), ok=(200,), what="the kernel"
    )


async def delete(api: JupyterAPI, session_id: str | None, kernel_id: str) -> None:
    """Shut down a session (and its kernel), or a kernel started without a session."""
    if session_id:
        await api.request("DELETE", api_path("api/sessions", session_id), what="the session")
    else:
        await api.request("DELETE", api_path("api/kernels", kernel_id), what="the kernel")


def shell_request(msg_type: str, content: Mapping[str, Any], session: str) -> dict[str, Any]:
    """A Jupyter protocol request for the shell channel, in the WebSocket's JSON form."""
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "username": "nbrelay",
            "session": session,
            "date": utc_iso(time.time(), timespec="microseconds"),
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": dict(content),
        "buffers": [],
        "channel": "shell",
    }
