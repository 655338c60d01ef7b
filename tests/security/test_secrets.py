"""Secrets (plan G4): canary tokens never appear in logs, results, notebooks, process arguments
or kernel environments, even with debug logging on and with failed attempts that carry tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import psutil
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import notebook, write_notebook
from tests.http.harness import (
    SERVING,
    auth_headers,
    canary_token,
    http_client,
    http_server,
    report,
    server_env,
)
from tests.security.surface import everything_said
from tests.security.users import (
    end_group,
    local_user,
    private_dir,
    require_users,
    shared_base,
    user_env,
)

pytestmark = pytest.mark.anyio

ENV_PROBE = (
    "import os\n"
    "found = sorted(k for k, v in os.environ.items() if 'CANARY' in v)\n"
    "raw = open('/proc/self/environ', 'rb').read()\n"
    "print('CANARY-VARS', found, b'CANARY' in raw)"
)


def _processes(pid: int) -> list[psutil.Process]:
    me = psutil.Process(pid)
    return [me, *me.children(recursive=True)]


async def test_tokens_never_leak_over_http(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    token, jupyter, wrong = canary_token("mcp"), canary_token("jupyter"), canary_token("wrong")
    secrets = (token, jupyter, wrong)
    root = tmp_path / "root"
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    said: list[str] = []
    argv: list[str] = []
    kernel_env_checked = 0
    with http_server(
        root,
        tmp_path,
        "--log-level",
        "DEBUG",
        token=token,
        env={"JUPYTER_TOKEN": jupyter},
    ) as server:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        async with httpx2.AsyncClient(timeout=60) as http:
            for attempt in (
                {"headers": {**headers, **auth_headers(wrong)}},
                {"headers": headers, "params": {"token": wrong}},
                {"headers": {**headers, **auth_headers(token)}, "params": {"access_token": token}},
                {"headers": {**headers, **auth_headers(wrong), "Host": "evil.example"}},
                {"headers": {**headers, **auth_headers(wrong), "Origin": "http://evil.example"}},
            ):
                resp = await http.post(server.url, json=body, **attempt)  # type: ignore[arg-type]
                assert resp.status_code in (401, 403, 421)
                said.append(resp.text + json.dumps(dict(resp.headers)))
        async with http_client(server.url, token, mode="legacy") as client:
            for tool, args in [
                ("list_notebooks", {}),
                ("read_notebook", {"path": "a.ipynb", "full": True}),
                ("read_notebook", {"path": "../outside.ipynb"}),
                ("edit_cell", {"path": "a.ipynb", "cell": 9, "source": "y"}),
                ("insert_cells", {"path": "a.ipynb", "cells": ["z = 2"]}),
                ("execute", {"path": "a.ipynb", "code": ENV_PROBE}),
                ("execute", {"path": "a.ipynb", "code": "import os; os.environ"}),
                ("execute", {"path": "a.ipynb", "cells": [0, 1]}),
            ]:
                with anyio.fail_after(120):
                    result = await client.call_tool(tool, cast(dict[str, Any], args))
                text = everything_said(result)
                said.append(text)
                if "CANARY-VARS" in text:
                    assert "CANARY-VARS [] False" in text, text[:500]
                    kernel_env_checked += 1
            # Process arguments of the server and its kernels; the kernels' environments.
            for proc in _processes(server.proc.pid):
                argv.append(" ".join(proc.cmdline()))
                if proc.pid != server.proc.pid:
                    env = proc.environ()
                    assert not [k for k, v in env.items() if any(s in v for s in secrets)]
                    kernel_env_checked += 1
        assert len(argv) >= 2, "no kernel process was checked"
        logs = server.stderr()
    notebooks = "".join(p.read_text() for p in root.rglob("*") if p.is_file())
    places = {"stderr log": logs, "results": "\n".join(said), "argv": "\n".join(argv)}
    places["notebooks"] = notebooks
    for where, text in places.items():
        for secret in secrets:
            assert secret not in text, f"a token leaked into the {where}"
    assert "refused POST /mcp" in logs  # the log did record the refusals, without the tokens
    assert kernel_env_checked >= 2
    report(
        request,
        f"G4 HTTP: 3 canary tokens (MCP, Jupyter, a wrong one sent in headers and query strings), "
        f"debug logging: 0 hits in {len(logs):,} bytes of log, {len(said)} results, "
        f"{len(argv)} process command lines, {kernel_env_checked} kernel environments, notebooks",
    )


async def test_tokens_in_the_environment_never_reach_kernels_over_stdio(tmp_path: Path) -> None:
    token, jupyter = canary_token("mcp"), canary_token("jupyter")
    write_notebook(tmp_path / "a.ipynb", notebook("x = 1"))
    env = server_env(token, {"JUPYTER_TOKEN": jupyter})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(tmp_path), "--log-level", "DEBUG"],
        env=env,
    )
    with anyio.fail_after(180):
        async with Client(params) as client:
            result = await client.call_tool("execute", {"path": "a.ipynb", "code": ENV_PROBE})
    text = everything_said(result)
    assert "CANARY-VARS [] False" in text, text[:500]
    assert token not in text
    assert jupyter not in text
    assert token not in (tmp_path / "a.ipynb").read_text()
    assert os.environ.get("NBRELAY_TOKEN") != token


# Kernel code that looks for the tokens (given reversed, so the code itself does not carry them
# into nbrelay's memory) in the initial environment of every ancestor process, and in the memory
# of its parent; it prints one JSON line.
ANCESTOR_PROBE = """
import json, os
needles = [t[::-1].encode() for t in {reversed_tokens!r}]
def parent_of(pid):
    with open(f"/proc/{{pid}}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])
def environ_of(pid):
    try:
        with open(f"/proc/{{pid}}/environ", "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        return type(exc).__name__
    return "token" if any(n in raw for n in needles) else "clean"
def memory_of(pid):
    try:
        with open(f"/proc/{{pid}}/maps") as maps, open(f"/proc/{{pid}}/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if "r" not in perms or end - start > 1 << 28:
                    continue
                try:
                    mem.seek(start)
                    chunk = mem.read(end - start)
                except OSError:
                    continue
                if any(n in chunk for n in needles):
                    return "token"
    except OSError as exc:
        return type(exc).__name__
    return "clean"
found = {{"self": environ_of(os.getpid()), "ancestors": []}}
pid = os.getppid()
found["parent memory"] = memory_of(pid)
while pid > 1:
    found["ancestors"].append([pid, environ_of(pid)])
    pid = parent_of(pid)
print("PROBE" + json.dumps(found))
"""


def _probe_result(result: Any) -> dict[str, Any]:
    """The JSON line the probe printed, from an ``execute`` result."""
    assert not result.is_error, result.content
    cells = result.structured_content["cells"]
    printed = "".join(str(o.get("text", "")) for o in cells[0].get("outputs") or [])
    line = next(x for x in printed.splitlines() if x.startswith("PROBE"))
    found: dict[str, Any] = json.loads(line.removeprefix("PROBE"))
    return found


async def test_a_kernel_finds_no_token_in_the_environment_of_any_ancestor(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The initial environment of nbrelay (readable in /proc/<pid>/environ by any process of
    the same user, kernels included) no longer holds $NBRELAY_TOKEN or $JUPYTER_TOKEN."""
    token, jupyter = canary_token("mcp"), canary_token("jupyter")
    root = tmp_path / "root"
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    code = ANCESTOR_PROBE.format(reversed_tokens=[token[::-1], jupyter[::-1]])
    with http_server(root, tmp_path, token=token, env={"JUPYTER_TOKEN": jupyter}) as server:
        async with http_client(server.url, token, mode="legacy") as client:
            with anyio.fail_after(120):
                result = await client.call_tool("execute", {"path": "a.ipynb", "code": code})
        found = _probe_result(result)
        chain = [pid for pid, _ in found["ancestors"]]
        assert server.proc.pid in chain, (server.proc.pid, found)  # nbrelay was looked at
    leaked = [pid for pid, seen in found["ancestors"] if seen == "token"]
    readable = [pid for pid, seen in found["ancestors"] if seen in ("clean", "token")]
    assert found["self"] == "clean"
    assert not leaked, f"the token is in the environment of process(es) {leaked}: {found}"
    report(
        request,
        f"G4 /proc/<pid>/environ: a kernel walked {len(chain)} ancestor processes "
        f"({len(readable)} environments readable, nbrelay's among them): the tokens were in 0",
    )


async def test_a_kernel_of_an_ordinary_user_cannot_read_nbrelays_environment_or_memory(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Run by a throw-away user (root could read anything): the kernel gets no access to
    nbrelay's /proc/<pid>/environ or /proc/<pid>/mem (nbrelay is not dumpable), whether or not
    the kernel Yama restricts ptrace on this machine."""
    require_users()
    token, jupyter = canary_token("mcp"), canary_token("jupyter")
    code = ANCESTOR_PROBE.format(reversed_tokens=[token[::-1], jupyter[::-1]])
    with shared_base() as base, local_user("srv") as user:
        home = private_dir(base / "home", user)
        root = private_dir(home / "notebooks", user)
        write_notebook(root / "a.ipynb", notebook("x = 1"))
        os.chown(root / "a.ipynb", user.uid, user.gid)
        errors = base / "stderr"
        env = user_env(home, home, NBRELAY_TOKEN=token, JUPYTER_TOKEN=jupyter)
        argv = user.argv(
            sys.executable, "-m", "nbrelay", "serve", "--http", "--port", "0", "--root", str(root)
        )
        with errors.open("wb") as err:
            proc = subprocess.Popen(  # noqa: ASYNC220 - started once, before any awaiting
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 120
            while not (found_url := SERVING.search(errors.read_text(errors="replace"))):
                assert proc.poll() is None, errors.read_text()
                assert time.monotonic() < deadline, errors.read_text()
                await anyio.sleep(0.1)
            async with http_client(found_url.group(1), token, mode="legacy") as client:
                with anyio.fail_after(120):
                    result = await client.call_tool("execute", {"path": "a.ipynb", "code": code})
        finally:
            end_group(proc)
    found = _probe_result(result)
    nbrelay_environ = found["ancestors"][0][1]
    assert nbrelay_environ == "PermissionError", found
    assert found["parent memory"] == "PermissionError", found
    report(
        request,
        "G4 same-user kernel (ordinary user): nbrelay's /proc/<pid>/environ and /proc/<pid>/mem "
        "refused (PermissionError); the tokens found in 0 of them",
    )


# Variables that hold credentials in real deployments (by name, or by a URL with a user and
# password, or a private key, in their value), and ordinary ones kernels should keep.
CREDENTIALS = {
    "DATABASE_URL": "postgres://app:hunter2@db.internal/app",
    "REDIS_URL": "redis://:s3cret@cache:6379/0",
    "CELERY_BROKER_URL": "amqp://guest:guest@mq//",
    "MONGODB_URI": "mongodb+srv://u:p@cluster0.example.net/db",
    "SENTRY_DSN": "https://abc123@o1.ingest.sentry.io/1",
    "HTTPS_PROXY": "http://user:pw@proxy.internal:3128",
    "DEPLOY_MATERIAL": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=",
    "DJANGO_SECRET_KEY": "django-insecure-x",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdzE",
    "GITHUB_TOKEN": "ghp_example",
    "GH_TOKEN": "ghp_example2",
    "PGPASSWORD": "pg-pass",
    "MYSQL_PWD": "my-pass",
    "DB_PASS": "db-pass",
    "SMTP_PASSWORD": "smtp-pass",
    "OPENAI_API_KEY": "sk-example",
    "STRIPE_APIKEY": "sk_live_x",
    "GOOGLE_APPLICATION_CREDENTIALS": "/secrets/gcp.json",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountKey=xyz",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/XYZ",
    "HTTP_AUTH": "basic dXNlcjpwdw==",
    "OAUTH_CLIENT_ID": "client-1",
    "JWT_SIGNING_KEY": "jwt-key",
    "ENCRYPTION_KEY": "enc-key",
    "GPG_PASSPHRASE": "gpg-pass",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "SESSION_COOKIE": "c00kie",
    "HASH_SALT": "salt",
}
# A CI job's JSON Web Token (GitLab's CI_JOB_JWT, GitHub's and CircleCI's OIDC tokens), shaped as
# the real ones are: base64url header and claims, then a signature.
JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyIsInR5cCI6IkpXVCJ9."
    "eyJuYW1lc3BhY2VfaWQiOiIxIiwicHJvamVjdF9pZCI6IjIiLCJ1c2VyX2xvZ2luIjoiYWRhIn0."
    "c2lnbmF0dXJlLW9mLXRoZS1qb2I"
)
# The credentials CI systems put in a job's environment (their documented names), and those a
# job commonly carries for the services it deploys to.
CI_CREDENTIALS = {
    # GitLab CI/CD
    "CI_JOB_JWT": JWT,
    "CI_JOB_JWT_V1": JWT,
    "CI_JOB_JWT_V2": JWT,
    "CI_JOB_TOKEN": "glcbt-64_Zx8yW7vU6tS5rQ4pO3nM",
    "CI_REGISTRY_PASSWORD": "glcbt-64_registry",
    "CI_DEPLOY_PASSWORD": "gldt-deploy",
    "CI_DEPENDENCY_PROXY_PASSWORD": "glcbt-64_proxy",
    "CI_REPOSITORY_URL": "https://gitlab-ci-token:glcbt-64_abc@gitlab.example.com/g/p.git",
    "SIGSTORE_ID": JWT,  # an id_tokens: entry, which the job names as it likes
    # GitHub Actions
    "ACTIONS_RUNTIME_TOKEN": JWT,
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token",
    "GH_PAT": "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2,
    "RELEASE_BOT": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789",
    # CircleCI
    "CIRCLE_OIDC_TOKEN": JWT,
    "CIRCLE_OIDC_TOKEN_V2": JWT,
    "CIRCLECI_CLI_TOKEN": "circle-token",
    # Buildkite
    "BUILDKITE_AGENT_ACCESS_TOKEN": "bkaj_job-token",
    "BUILDKITE_AGENT_TOKEN": "agent-registration-token",
    # Azure Pipelines and Azure
    "SYSTEM_ACCESSTOKEN": "azp-access-token",
    "AZURE_DEVOPS_EXT_PAT": "azure-devops-pat",
    "AZURE_CLIENT_SECRET": "azure-client-secret",
    "ARM_CLIENT_SECRET": "arm-client-secret",
    "ARM_OIDC_TOKEN": JWT,
    "IDENTITY_HEADER": "managed-identity-header",
    "MSI_SECRET": "msi-secret",
    "AZURE_STORAGE_SAS": "sv=2022-11-02&ss=b&srt=co&sp=rl&se=2030-01-01&sig=abc%2Bdef",
    # Google Cloud
    "GOOGLE_CREDENTIALS": '{"type": "service_account", "private_key_id": "k"}',
    "GOOGLE_GHA_CREDS_PATH": "/home/runner/work/_temp/gha-creds-1a2b.json",
    "CLOUDSDK_AUTH_ACCESS_TOKEN": "ya29.access-token",
    "GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.oauth-token",
    # HashiCorp Vault
    "VAULT_TOKEN": "hvs.vault-token",
    "VAULT_SECRET_ID": "approle-secret-id",
    "VAULT_UNSEAL_KEY": "unseal-key",
    # registries and services
    "NPM_TOKEN": "npm_" + "a1B2c3D4e5F6g7H8i9J0" * 2,
    "NODE_AUTH_TOKEN": "node-auth-token",
    "TWINE_PASSWORD": "pypi-twine-password",
    "DOCKER_AUTH_CONFIG": '{"auths": {"registry.example.com": {"auth": "dXNlcjpwdw=="}}}',
    "CODECOV_TOKEN": "codecov-token",
    "HF_TOKEN": "hf_huggingfacetoken",
    "SLACK_BOT": "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
}
ORDINARY = {
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.org",
    "HTTP_PROXY": "http://proxy.internal:3128",
    "PIP_INDEX_URL": "https://pypi.org/simple",
    "AWS_REGION": "eu-west-1",
    "KEYTIMEOUT": "1",
    "OMP_NUM_THREADS": "2",
    "MY_SETTING": "on",
    "LD_LIBRARY_PATH": "/opt/lib",
    "CI": "true",
    "CI_JOB_ID": "4242",
    "CI_COMMIT_SHA": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
    "GITHUB_REPOSITORY": "ada/analysis",
    "CIRCLE_BRANCH": "main",
    "BUILDKITE_BUILD_NUMBER": "17",
    "JAVA_TOOL_OPTIONS": "-Dfile.encoding=UTF-8",
}
NAMES_PROBE = """
import json, os
raw = open('/proc/self/environ', 'rb').read()
names = {names!r}
print("PROBE" + json.dumps(sorted(n for n in names if n in os.environ or (n + "=").encode() in raw)))
"""


async def _kernel_sees(tmp_path: Path, env: dict[str, str], *args: str) -> list[str]:
    """The names of ``env`` that a kernel started by ``nbrelay serve ARGS`` over stdio sees."""
    write_notebook(tmp_path / "a.ipynb", notebook("x = 1"))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(tmp_path), *args],
        env=server_env(None, env),
    )
    code = NAMES_PROBE.format(names=sorted(env))
    with anyio.fail_after(180):
        async with Client(params) as client:
            result = await client.call_tool("execute", {"path": "a.ipynb", "code": code})
    cells = cast(dict[str, Any], result.structured_content)["cells"]
    printed = "".join(str(o.get("text", "")) for o in cells[0].get("outputs") or [])
    line = next(x for x in printed.splitlines() if x.startswith("PROBE"))
    seen: list[str] = json.loads(line.removeprefix("PROBE"))
    return seen


async def test_credential_like_variables_never_reach_a_kernel(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    secrets = {**CREDENTIALS, **CI_CREDENTIALS}
    seen = await _kernel_sees(tmp_path, {**secrets, **ORDINARY})
    leaked = sorted(set(seen) & set(secrets))
    assert not leaked, f"{len(leaked)} of {len(secrets)} reached the kernel: {leaked}"
    assert sorted(ORDINARY) == sorted(set(seen) & set(ORDINARY))
    report(
        request,
        f"G4 kernel environment: 0 of {len(secrets)} credential-like variables "
        f"({len(CI_CREDENTIALS)} of them CI systems') reached a real kernel; "
        f"{len(ORDINARY)} of {len(ORDINARY)} ordinary ones did",
    )


async def test_kernel_env_is_an_allow_list(tmp_path: Path) -> None:
    env = {
        "MY_A": "1",
        "MY_B": "2",
        "MY_SECRET": "matched by a pattern, but a credential",
        "OTHER": "not allowed",
        "GITHUB_TOKEN": "named exactly: the user passes it on purpose",
        "GH_TOKEN": "not allowed",
        "LC_ALL": "C.UTF-8",
        "NBRELAY_AGENT_NAME": "nbrelay's own setting: never",
    }
    allow = "PATH,HOME,LC_*,MY_*,GITHUB_TOKEN,NBRELAY_*"
    seen = await _kernel_sees(tmp_path, env, "--kernel-env", allow)
    assert seen == ["GITHUB_TOKEN", "LC_ALL", "MY_A", "MY_B"]
