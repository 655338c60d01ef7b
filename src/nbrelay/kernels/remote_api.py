"""The REST side of a remote server's kernels: kernelspecs, sessions and kernels (start, look
up, interrupt, restart, delete) through the Jupyter Server's ``api/kernelspecs``,
``api/sessions`` and ``api/kernels``, and the envelope of a request sent on a kernel's
WebSocket. ``remote.py`` holds the sessions that use them.
"""

from __future__ import annotations

import os
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
    """The server's model of a kernel, or None when it has no such kernel.

    Read from the list of kernels where the server gives one: a Jupyter Server whose kernels run
    on a gateway (``--gateway-url``) answers ``api/kernels/{id}`` from its memory, and only its
    listing asks the gateway (and forgets the kernels the gateway lost: a gateway that restarted
    has none of them, while the server kept saying they were idle). A Kernel Gateway that does
    not list kernels (its default) answers 403 there; its own ``api/kernels/{id}`` is exact.
    """
    if api.lists_kernels:
        resp = await api.request("GET", "api/kernels", ok=(200, 403), what="the kernels")
        if resp.status == 200 and isinstance(resp.body, list):
            for model in resp.body:
                if isinstance(model, dict) and model.get("id") == kernel_id:
                    return model
            return None
        api.lists_kernels = False
    try:
        resp = await api.request(
            "GET", api_path("api/kernels", kernel_id), ok=(200,), what="the kernel"
        )
    except NotebookNotFound:
        return None
    return resp.body if isinstance(resp.body, dict) else {}


async def find_session(api: JupyterAPI, path: str) -> dict[str, Any] | None:
    """The session the server has for a notebook path (with a kernel), or None; raises
    ``NotebookNotFound`` when the server has no sessions API, or does not list its sessions: a
    kernel gateway (Kernel Gateway and Enterprise Gateway answer 403 unless configured to list
    kernels, which they are not by default; the token was checked by the requests before)."""
    resp = await api.request("GET", "api/sessions", ok=(200, 403), what="the sessions API")
    if resp.status == 403:
        raise NotebookNotFound("the server does not list its sessions.")
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


def gateway_env() -> dict[str, str]:
    """What a gateway is told of the kernel to start: the ``KERNEL_*`` variables of nbrelay's
    environment, as Jupyter Server sends them (``KERNEL_USERNAME``, the user Enterprise Gateway
    runs the kernel as and refuses to start one without, by default; ``KERNEL_NAMESPACE`` …)."""
    return {k: v for k, v in os.environ.items() if k.startswith("KERNEL_")}


async def start_kernel(api: JupyterAPI, kernel_name: str) -> dict[str, Any]:
    """Start a kernel without a session (a gateway); its model."""
    failed = f"the kernel server could not start a {kernel_name} kernel"
    body = {"name": kernel_name, "env": gateway_env()}
    try:
        return await _start(api, "api/kernels", body, "a kernel", failed)
    except KernelError as exc:
        if "KERNEL_USERNAME" not in exc.message:
            raise
        raise KernelError(
            exc.message,
            hint="Set KERNEL_USERNAME in nbrelay's environment to the user the gateway should "
            "run the kernel as (nbrelay passes its KERNEL_* variables to the gateway, as Jupyter "
            "Server does), then retry.",
        ) from exc


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
