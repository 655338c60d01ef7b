"""No log level prints a credential (live mode at DEBUG, with a real Jupyter Server and canary
tokens), and server URLs that carry credentials (``user:password@``, ``?access_token=``) are
refused at start-up without being echoed.

Before the fix, ``--log-level DEBUG`` logged ``> Authorization: token …`` (websockets and the
HTTP client log request headers), and ``--jupyter-url http://user:pass@host`` was accepted and
echoed in error results and logs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import notebook, write_notebook
from tests.http.harness import canary_token, http_client, http_server, report, server_env
from tests.live.server import JupyterServer, free_port
from tests.security.surface import everything_said

pytestmark = pytest.mark.anyio


async def test_debug_logs_of_live_mode_hold_no_credential(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    jupyter_token = canary_token("jupyter")
    lab = JupyterServer(
        root=tmp_path / "lab", work=tmp_path / "work", port=free_port(), token=jupyter_token
    )
    lab.start()
    try:
        write_notebook(lab.root / "a.ipynb", notebook("x = 1"))
        said: list[str] = []
        with http_server(
            tmp_path / "unused",
            tmp_path,
            "--jupyter-url",
            lab.url,
            "--log-level",
            "DEBUG",
            env={"JUPYTER_TOKEN": jupyter_token},
        ) as server:
            async with http_client(server.url, server.token) as client:
                calls: list[tuple[str, dict[str, Any]]] = [
                    ("list_notebooks", {}),
                    ("read_notebook", {"path": "a.ipynb"}),
                    ("insert_cells", {"path": "a.ipynb", "cells": ["print('hi')"]}),
                    ("execute", {"path": "a.ipynb", "cells": [-1], "wait": 60}),
                    ("read_notebook", {"path": "missing.ipynb"}),
                ]
                for tool, args in calls:
                    result = await client.call_tool(tool, args)
                    said.append(everything_said(result))
            logs = server.stderr()
    finally:
        lab.stop()
    assert "hi" in said[3]  # the run really went through the kernel's WebSocket
    assert "Authorization" in logs or "authorization" in logs  # headers were logged…
    assert jupyter_token not in logs  # …without the token
    assert server.token not in logs
    assert jupyter_token not in "\n".join(said)
    report(
        request,
        f"G4 live mode at --log-level DEBUG: 0 tokens in {len(logs):,} bytes of log "
        f"({logs.count(chr(10)):,} lines, {logs.lower().count('authorization')} mentions of "
        "an Authorization header, each [redacted])",
    )


@pytest.mark.parametrize(
    ("option", "url"),
    [
        ("--jupyter-url", "http://alice:{secret}@127.0.0.1:9/"),
        ("--jupyter-url", "http://{secret}@127.0.0.1:9/lab"),
        ("--jupyter-url", "http://127.0.0.1:9/lab?access_token={secret}"),
        ("--jupyter-url", "http://127.0.0.1:9/?token={secret}"),
        ("--kernel-gateway-url", "https://bob:{secret}@gateway.example:8888/"),
        ("--kernel-gateway-url", "http://127.0.0.1:9/?api_key={secret}"),
    ],
)
def test_urls_with_credentials_are_refused_without_echoing_them(
    tmp_path: Path, option: str, url: str
) -> None:
    secret = canary_token("pass")
    for argv, env in (
        ([option, url.format(secret=secret)], {}),
        ([], {f"NBRELAY_{option[2:].upper().replace('-', '_')}": url.format(secret=secret)}),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "nbrelay", "serve", "--root", str(tmp_path), *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            env=server_env(None, env),
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "refused" in done.stderr
        assert "user name or password" in done.stderr or "credential" in done.stderr
        assert secret not in done.stderr + done.stdout


def test_the_log_filter_takes_out_every_kind_of_credential() -> None:
    import logging

    from nbrelay.config import RedactSecrets, Secret, redact

    known = canary_token("known")
    Secret(known)
    records = [
        ("> Authorization: token %s", (known,)),
        ("headers %r", ({"Authorization": "Bearer abcdefgh", "Cookie": "_xsrf=2|aa"},)),
        ("GET http://user:hunter22@host:8888/api/contents?token=zzzzzz&x=1", ()),
        ("connecting with %s", (known,)),
    ]
    handler = logging.Handler()
    handler.addFilter(RedactSecrets())
    out = []
    for msg, args in records:
        record = logging.LogRecord("websockets.client", logging.DEBUG, __file__, 1, msg, args, None)
        assert handler.filter(record)
        out.append(record.getMessage())
    text = "\n".join(out)
    for leaked in (known, "abcdefgh", "_xsrf=2|aa", "hunter22", "zzzzzz"):
        assert leaked not in text
    assert "x=1" in text  # other parameters stay
    assert redact("nothing secret here") == "nothing secret here"
