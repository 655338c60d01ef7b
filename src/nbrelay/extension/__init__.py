"""nbrelay inside Jupyter Server: the MCP endpoint at ``{base_url}mcp`` (a server extension).

``pip install nbrelay`` puts ``etc/jupyter/jupyter_server_config.d/nbrelay.json`` into the
environment, which enables the extension; ``jupyter server extension disable nbrelay`` turns it
off. Requests are authenticated and authorised by Jupyter itself (its token, cookies or a
JupyterHub OAuth token, and its authorizer); notebooks are read and edited in process through
jupyter-collaboration's rooms or the contents manager, and code runs in the server's kernels.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from nbrelay.extension.app import NbrelayExtension

    return [{"module": "nbrelay.extension", "app": NbrelayExtension}]
