"""Where a Jupyter Server is and how nbrelay may reach it: the base URL from ``--jupyter-url``
(credentials in it refused), API paths, the token, and the probe that needs none."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from nbrelay.config import Secret, Settings, safe_url, url_problem
from nbrelay.errors import InvalidArgument

_APP_SUFFIX = re.compile(r"/(lab|tree|notebooks|edit|doc)(/.*)?$")


def load_token(settings: Settings) -> Secret | None:
    """The Jupyter token: ``--jupyter-token-file`` if given, else ``$JUPYTER_TOKEN`` (or None).

    Raises:
        InvalidArgument: the token file is missing, unreadable or empty.
    """
    path = settings.jupyter_token_file
    if path is None:
        return settings.jupyter_token
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InvalidArgument(
            f"--jupyter-token-file {path} cannot be read: {exc.strerror}.",
            hint="Give a file that holds the Jupyter Server's token (`jupyter server list` shows "
            "it), or set $JUPYTER_TOKEN instead.",
        ) from exc
    if not text:
        raise InvalidArgument(
            f"--jupyter-token-file {path} is empty.",
            hint="Put the Jupyter Server's token in it (`jupyter server list` shows it).",
        )
    return Secret(text.splitlines()[0].strip())


def base_url(url: str) -> str:
    """Normalise ``--jupyter-url`` to the server's base URL, ending in ``/``.

    A JupyterLab address such as ``http://host:8888/lab/tree/a.ipynb`` is cut back to
    ``http://host:8888/``; credentials in the URL (``user:password@``, ``?token=``) are refused
    (they would show in process lists, logs and errors).
    """
    problem = url_problem(url)
    if problem:
        raise InvalidArgument(
            f"the Jupyter Server URL {safe_url(url)!r} is refused: {problem}.",
            hint="Give the URL without credentials and pass the token in $JUPYTER_TOKEN or "
            "--jupyter-token-file, so it does not show in process lists or logs.",
        )
    try:
        parts = urlsplit(url.strip())
        hostname = parts.hostname
    except ValueError:
        hostname = None
    if hostname is None or parts.scheme not in ("http", "https"):
        raise InvalidArgument(
            f"--jupyter-url {safe_url(url)!r} is not an http(s) URL.",
            hint="Give the address JupyterLab runs at, e.g. http://127.0.0.1:8888/.",
        )
    path = _APP_SUFFIX.sub("", parts.path)
    if not path.endswith("/"):
        path += "/"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def api_path(*parts: str) -> str:
    """Join API path parts, quoting each (``/`` inside a notebook path is kept)."""
    return "/".join(quote(p.strip("/"), safe="/") for p in parts if p.strip("/"))


async def probe(url: str, *, seconds: float = 5.0) -> bool:
    """Whether a Jupyter Server answers at ``url``: ``GET <base>/api`` (which needs no token)
    returns its version. No token is sent and no redirect followed; only http(s) URLs.

    Raises:
        InvalidArgument: ``url`` is not an http(s) URL, or carries credentials.
    """
    import httpx2

    target = base_url(url) + "api"
    try:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=seconds) as client:
            response = await client.get(target)
    except httpx2.HTTPError:
        return False
    if response.status_code != 200:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("version"), str)
