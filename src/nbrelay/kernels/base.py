"""The kernel interfaces: where code runs, seen from the caller's side.

Two protocols, implemented by every backend (``local.py``: processes started with jupyter_client;
``remote.py``: the kernels REST + WebSocket API of a Jupyter Server or Kernel Gateway):

* ``KernelProvider`` starts, finds and stops the kernels of a workspace, one per notebook key.
  Called by ``Workspace`` only.
* ``KernelSession`` is one running kernel: send a request, receive its raw messages, watch its
  liveness, interrupt, restart, shut down. Called by ``kernels.execution`` (the message loop both
  backends share) and, for lifecycle requests, by ``Workspace``.

Messages are the Jupyter wire protocol's dicts as ``jupyter_client`` deserialises them:
``{"header": {...}, "parent_header": {...}, "msg_type": str, "content": {...}, "metadata": {...}}``
(``header.msg_type`` is always set; ``msg_type`` at the top level may be missing). A backend never
filters messages by parent: the loop in ``execution.py`` does that, and stops on the kernel's
``status: idle`` for its request.

Errors: every method raises ``nbrelay.errors.KernelError`` (never a backend's own exception) with a
message that names the kernel and a hint.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, act
from nbrelay.redaction import is_credential_name

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

Msg = dict[str, Any]

# Environment variables a kernel never sees, whatever --kernel-env says: nbrelay's own settings
# and the tokens of nbrelay and Jupyter.
OWN_ENV = re.compile(r"^(NBRELAY_.*|JUPYTER_TOKEN|JPY_API_TOKEN|JUPYTERHUB_API_TOKEN)$", re.I)
# Names that look like a credential (a notebook's code could read and leak it): these words
# anywhere in the name, or as a whole part of it between underscores (so GIT_AUTHOR_NAME and
# KEYTIMEOUT stay, SSH_AUTH_SOCK, AWS_ACCESS_KEY_ID and AZURE_DEVOPS_EXT_PAT go), and the
# secret header of Azure's managed identity.
SECRET_ENV = re.compile(
    r"^(.*(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTHORI[SZ]ATION|COOKIE|WEBHOOK"
    r"|CONNECTION_?STRING|APIKEY|PRIVATE_?KEY|JWT).*"
    r"|(.*_)?(O?AUTH|KEYS?|PASS|DSN|SALT|PAT|CREDS)(_.*)?"
    r"|.+_PWD(_.*)?"
    r"|IDENTITY_HEADER)$",
    re.IGNORECASE,
)
# Values that carry a credential whatever the name: a URL with a user (and password) in it
# (postgres://app:pw@db/app, https://TOKEN@github.com) or a PEM private key.
SECRET_VALUE = re.compile(
    r"[a-z][a-z0-9+.-]*://[^/?#\s@]+@|-----BEGIN [A-Z ]*PRIVATE KEY-----", re.IGNORECASE
)
# Tokens whose format gives them away, also under a name like none above: a JSON Web Token (such
# as a CI job's OIDC token, which GitLab lets a job name freely), and the tokens of GitHub,
# GitLab, Slack, AWS (access key ids), Google (API keys), npm, PyPI, Hugging Face,
# OpenAI/Anthropic and Stripe.
TOKEN_VALUE = re.compile(
    r"\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]*"
    r"|\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,}"
    r"|gl(pat|dt|rt|cbt|ptt|ft|imt|agent|oas|soat)-[\w-]{20,}|xox[abposr]-[\w-]{10,}"
    r"|(AKIA|ASIA)[0-9A-Z]{16}|AIza[\w-]{35}|npm_[A-Za-z0-9]{36}|pypi-AgE[\w-]{40,}"
    r"|hf_[A-Za-z]{30,}|sk-[\w-]{32,}|[rs]k_live_[0-9A-Za-z]{20,})\b"
)
# The parameter names of a query string in a value (a SAS token ``sv=…&sig=…``, a webhook URL
# with ``?token=``), checked as those of URLs given to nbrelay are (``is_credential_name``).
_QUERY_NAMES = re.compile(r"(?:^|[?&;])([\w.-]+)=")


def kernel_env_passes(name: str, value: str, keep: Sequence[str] = ()) -> bool:
    """Whether an environment variable of nbrelay reaches its kernels.

    Never nbrelay's own settings and tokens (``OWN_ENV``). Without ``keep`` (``--kernel-env``),
    every other variable except the ones that look like credentials (``SECRET_ENV`` names,
    ``secret_value`` values). With ``keep``, only variables that match one of its names or
    shell-style patterns, still without credentials, unless one is named exactly.
    """
    if OWN_ENV.match(name):
        return False
    if keep:
        if name in keep:
            return True
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in keep):
            return False
    return not (SECRET_ENV.match(name) or secret_value(value))


def secret_value(value: str) -> bool:
    """Whether an environment variable's value carries a credential whatever its name
    (``SECRET_VALUE``, ``TOKEN_VALUE``, or a query string with a credential parameter)."""
    if SECRET_VALUE.search(value) or TOKEN_VALUE.search(value):
        return True
    return any(is_credential_name(m.group(1)) for m in _QUERY_NAMES.finditer(value))


def msg_type(msg: Msg) -> str:
    """The message's type (``stream``, ``execute_reply``, …)."""
    kind = msg.get("msg_type") or msg.get("header", {}).get("msg_type")
    return str(kind or "")


def parent_id(msg: Msg) -> str | None:
    """The ``msg_id`` of the request a message answers (None for unsolicited messages)."""
    parent = msg.get("parent_header") or {}
    value = parent.get("msg_id")
    return str(value) if value else None


@dataclass(frozen=True)
class KernelSpecInfo:
    """An installed kernelspec: ``name`` is what a notebook's ``metadata.kernelspec.name`` holds."""

    name: str
    display_name: str
    language: str
    owned: bool = False  # registered by nbrelay itself (for example the Deno kernel)


def specs_by_name(found: Mapping[str, Any] | None) -> dict[str, KernelSpecInfo]:
    """A Jupyter Server's kernelspecs by name, from its ``{name: {"spec": {...}}}`` listing."""
    specs: dict[str, KernelSpecInfo] = {}
    for name, entry in (found or {}).items():
        spec = (entry or {}).get("spec") or {}
        specs[str(name)] = KernelSpecInfo(
            name=str(name),
            display_name=str(spec.get("display_name") or name),
            language=str(spec.get("language") or ""),
        )
    return specs


def server_spec(specs: Mapping[str, KernelSpecInfo], kernel_name: str) -> KernelSpecInfo:
    """The Jupyter Server's kernelspec ``kernel_name``; a ``KernelError`` naming the others."""
    if kernel_name not in specs:
        raise KernelError(
            f"the Jupyter Server has no kernelspec {kernel_name!r}.",
            hint=f"Its kernelspecs: {', '.join(sorted(specs)) or 'none'}. {act('set_kernel')}",
        )
    return specs[kernel_name]


def session_kernel(key: str, model: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """A Jupyter session model's kernel id, kernel name and session id (None for a bare
    kernel); a ``KernelError`` when the server gave no kernel."""
    kernel = model.get("kernel") or {}
    kernel_id = str(kernel.get("id") or "")
    if not kernel_id:
        raise KernelError(f"the Jupyter Server gave no kernel for {key!r}.")
    return kernel_id, str(kernel.get("name") or ""), str(model["id"]) if model.get("id") else None


@dataclass(frozen=True)
class KernelInfo:
    """A running kernel as ``list_kernels`` shows it."""

    key: str  # the notebook the kernel belongs to (its path relative to the root)
    kernel_id: str
    name: str  # kernelspec name
    language: str
    cwd: str
    started: float  # epoch seconds
    last_activity: float  # epoch seconds of the last request or message
    state: Literal["starting", "idle", "busy", "dead", "suspended"]
    pid: int | None = None
    restarts: int = 0


@dataclass(frozen=True)
class LaunchPolicy:
    """How a local kernel process is launched: the one place where isolation is decided.

    The local provider applies every field to every kernel it starts (warm pool included), so a
    stricter policy never misses a kernel:

    * ``argv_prefix`` is put before the kernelspec's argv (a sandbox wrapper such as
      ``("bwrap", "--die-with-parent", ...)``);
    * ``transport`` is the ZeroMQ transport (``"ipc"`` keeps the kernel's sockets off the network
      stack, for a sandbox without one);
    * ``env`` is added to the kernel's environment after the secrets are removed;
    * ``keep_env`` is ``--kernel-env``: the names and shell-style patterns of the variables
      kernels get (empty: all but credentials; see ``kernel_env_passes``).

    Resource limits (``RLIMIT_AS``, ``RLIMIT_CPU``) belong here too: the provider passes
    ``popen_kwargs()`` to the process launch, so a ``preexec_fn`` that sets them goes there.
    """

    argv_prefix: tuple[str, ...] = ()
    transport: Literal["tcp", "ipc"] = "tcp"
    env: Mapping[str, str] = field(default_factory=dict)
    keep_env: tuple[str, ...] = ()

    def for_launch(
        self,
        *,
        cwd: str,
        connection_file: str,
        ipc_dir: str | None,
        cwd_fds: Sequence[int] = (),
    ) -> LaunchPolicy:
        """The policy for one launch of one kernel (a sandbox binds that kernel's folder,
        connection file and socket folder); called by the provider just before ``command``.
        ``cwd_fds`` are descriptors of the kernel's folder, opened and checked by the store
        (see ``binds_folder``)."""
        return self

    def binds_folder(self) -> bool:
        """Whether the launch shows the kernel its folder by binding it (a file sandbox): the
        provider then passes descriptors of the folder, so that a folder swapped for a symlink
        after the path checks is never what gets bound."""
        return False

    def command(self, argv: Sequence[str]) -> list[str]:
        """The full command line for a kernelspec's (already formatted) argv."""
        return [*self.argv_prefix, *argv]

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The kernel's environment: ``base`` without secrets, plus ``env``."""
        out = {k: v for k, v in base.items() if kernel_env_passes(k, v, self.keep_env)}
        out.update(self.env)
        return out

    def popen_kwargs(self) -> dict[str, Any]:
        """Extra keyword arguments for ``subprocess.Popen`` (none yet; limits go here)."""
        return {}


class KernelSession(Protocol):
    """One running kernel. Obtained from ``KernelProvider.session``; valid until ``shutdown``.

    A session is used by one execution at a time: ``kernels.execution.Runner`` holds a lock around
    each request, so implementations need no locking of their own for requests and receives.
    """

    @property
    def info(self) -> KernelInfo:
        """The kernel as it is now. Called by ``list_kernels`` and by tool results."""
        ...

    async def send(self, msg_type: str, content: Mapping[str, Any]) -> str:
        """Send a request on the shell channel and return its ``msg_id``.

        Called by ``execution.Runner`` for ``execute_request`` (and ``inspect_request`` /
        ``kernel_info_request``). Never waits for the reply.
        """
        ...

    async def iopub(self) -> Msg:
        """Wait for and return the next IOPub message, whatever request it belongs to.

        Called in a loop by ``execution.Runner`` while a request runs; cancelled by it when the
        request is done, so a message must never be lost to cancellation.
        """
        ...

    def queued_iopub(self) -> list[Msg]:
        """The IOPub messages already received and not yet read, taken without waiting (what
        arrived between runs: a kernel restarted by someone else says so there)."""
        ...

    async def shell(self) -> Msg:
        """Wait for and return the next shell-channel reply. Same contract as ``iopub``."""
        ...

    async def exit_status(self) -> str | None:
        """None while the kernel is alive; otherwise in plain words how it ended.

        For example ``"was killed by signal 9 (SIGKILL)"`` or ``"exited with code 3"``; a remote
        backend that cannot know says ``"died"``. Called about once a second by
        ``execution.Runner`` while a request runs (a dead kernel never replies), and by
        ``Workspace`` before it reuses a session.
        """
        ...

    async def interrupt(self, caller: Caller) -> None:
        """Interrupt the running code (for ``caller``, whom a Jupyter Server's authorizer is asked) (SIGINT or an ``interrupt_request``, as the kernelspec
        says). Called on timeout, on cancellation, and by ``interrupt_kernel``."""
        ...

    async def restart(self, caller: Caller) -> None:
        """For ``caller``: replace the kernel process with a fresh one (all state lost) and wait until it answers.

        The session object stays valid; messages of the old process are discarded. Called by
        ``execution.Runner`` after an unanswered interrupt or a death, and by ``restart_kernel``.
        Raises ``KernelError`` if the new process does not start.
        """
        ...

    async def shutdown(self) -> None:
        """Stop the kernel (politely, then by force) and release its resources. Idempotent.
        Called by ``KernelProvider.shutdown``/``aclose`` only."""
        ...


class KernelProvider(Protocol):
    """Starts and tracks a workspace's kernels: at most one per notebook key.

    Idle kernels are shut down by ``Workspace`` (it knows which kernels run code), through
    ``shutdown``; a provider has no timers of its own.
    """

    # Whether its kernels are processes nbrelay starts on this machine (then --max-kernels has a
    # default), not a Jupyter Server's or a gateway's (theirs to limit).
    on_this_machine: bool

    def attach(self, tg: TaskGroup) -> None:
        """Give the provider a task group for background work (warming kernels up). Called once
        by ``Workspace.running`` when the server starts; without it nothing runs in the
        background."""
        ...

    async def session(
        self, key: str, caller: Caller, *, kernel_name: str, cwd: str
    ) -> KernelSession:
        """Return the notebook's kernel (for ``caller``), starting one (or taking a warm one) if it has none.

        ``key`` is the notebook's path relative to the root; ``kernel_name`` comes from the
        notebook's ``metadata.kernelspec.name``; ``cwd`` is the notebook's folder: absolute
        when the store keeps files on this machine, otherwise relative to the store's root (for a
        Jupyter Server, its root), ``""`` meaning the root itself.
        Called by ``Workspace`` before every execution. A session whose kernel died is returned
        as is: the caller restarts it (``execution.Runner`` decides). Raises ``KernelError`` when
        the kernelspec is unknown or the kernel does not start (naming the spec and the end of its
        stderr).
        """
        ...

    def get(self, key: str) -> KernelSession | None:
        """The notebook's running kernel, or None (never starts one). Called by ``Workspace``."""
        ...

    def running(self) -> list[KernelInfo]:
        """Every kernel this provider started and has not shut down. Called by ``list_kernels``."""
        ...

    async def refresh(self) -> None:
        """Bring what ``running`` says up to date where another holds the kernels (a server
        may have culled one, or a person shut it down). Called by ``list_kernels`` first."""
        ...

    async def kernelspecs(self, caller: Caller) -> list[KernelSpecInfo]:
        """The kernelspecs a notebook may name (asked by ``caller``). Called by ``list_kernels``."""
        ...

    async def shutdown(self, key: str, caller: Caller, *, wait: bool = True) -> bool:
        """Shut down the notebook's kernel for ``caller``; False if it had none. Called by ``shutdown_kernel``
        and by the idle reaper. ``wait=False`` (making room for another kernel): the kernel is
        no longer listed when this returns, and may finish stopping in the background."""
        ...

    async def aclose(self) -> None:
        """Shut down every kernel (warm ones included). Called once when the server stops."""
        ...


async def answers_kernel_info(session: KernelSession, within: float) -> bool:
    """Ask for kernel_info until the kernel answers on shell *and* its iopub status for that
    request reaches nbrelay (False if not within ``within`` seconds). A reply alone is not
    enough: a kernel may still be starting, and a server's iopub subscription can lag behind
    shell (after a restart, or a fresh connection), so output sent before it is in place would
    be lost."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        msg_id = await session.send("kernel_info_request", {})
        with anyio.move_on_after(2):
            while parent_id(await session.shell()) != msg_id:
                pass
            while parent_id(await session.iopub()) != msg_id:
                pass
            return True
    return False
