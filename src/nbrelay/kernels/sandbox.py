"""Kernel isolation: the launch policy that applies nbrelay's limits and sandbox to local kernels.

With ``--sandbox`` a kernel runs under bubblewrap (``bwrap``) in new user, PID, IPC, UTS and
network namespaces with every capability dropped, and sees:

* the notebook's folder, read-write (its working directory);
* the system read-only: ``/usr`` (and the ``/bin``, ``/lib`` links), the kernel's own Python
  environment, and of ``/etc`` only what ordinary code needs (``_ETC``: the dynamic loader's
  cache, TLS certificates, users and groups, host names and DNS, the time zone, fonts, the
  alternatives links ``/usr`` points through, MIME types, the OS name) — not the rest, where
  files only some users may read live (password hashes, a token file such as
  ``/etc/nbrelay/tokens``, other services' settings);
* its own connection file (read-only) and socket folder (the kernel talks to nbrelay over
  ZeroMQ's ``ipc`` transport, Unix sockets in that folder, so it needs no network);
* a private ``/tmp`` (also ``$HOME``) that disappears with the kernel, a private ``/proc`` and a
  minimal ``/dev`` — and nothing else of the file system.

Network access is off unless ``--kernel-network`` allows it (without ``--sandbox``,
``--no-kernel-network`` alone also runs the kernel under bwrap, in a network namespace of its
own). A sandboxed kernel starts cold: warm kernels would have to see every folder.

When the machine cannot do what the settings ask (no bwrap, namespaces refused, no rlimits),
``launch_policy`` raises ``Unsupported`` at start-up, naming what is missing: a setting is
never silently dropped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument, Unsupported
from nbrelay.kernels.base import LaunchPolicy
from nbrelay.kernels.limits import KernelLimits

_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc a kernel sees (read-only, where present). A link that leads into /usr or /proc is
# made again as a link (its target is there in the sandbox); any other is bound as its target.
_ETC = (
    # the dynamic loader (multiarch library folders are only in its cache)
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    # TLS: the CA certificates (Debian, Red Hat) and OpenSSL's settings, not private keys
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/tls/openssl.cnf",
    "pki/ca-trust",
    "crypto-policies",
    # users, groups and names: getpass.getuser(), socket.getaddrinfo(), services
    "passwd",
    "group",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "networks",
    # time zone, locale aliases, fonts (fontconfig), Debian's alternatives, MIME types
    "localtime",
    "timezone",
    "locale.alias",
    "locale.conf",
    "fonts",
    "alternatives",
    "mime.types",
    "magic",
    "magic.mime",
    "terminfo",
    # what system the kernel runs on; the mounted file systems (a link into /proc)
    "os-release",
    "lsb-release",
    "debian_version",
    "mtab",
    # system-wide settings of the tools kernels run
    "matplotlibrc",
    "jupyter",
    "ipython",
    "R",
)
_IPYKERNEL = ("ipykernel_launcher", "ipykernel")
_TMP = "/tmp"  # noqa: S108 - the sandbox's own private tmpfs, not the host's


@dataclass(frozen=True)
class Sandbox:
    """How to wrap a kernel in bwrap: ``filesystem`` confines the file system, ``network``
    allows network access."""

    bwrap: str
    filesystem: bool = True
    network: bool = False
    etc: tuple[str, ...] = _ETC  # what of /etc the kernel sees

    def namespaces(self) -> list[str]:
        # In its own PID namespace the kernel's parent is the namespace's init (pid 1), which
        # ipykernel's parent poller would take for a dead nbrelay: --die-with-parent does its job.
        flags = ["--die-with-parent", "--unshare-all", "--cap-drop", "ALL"]
        flags += ["--unsetenv", "JPY_PARENT_PID"]
        if self.network:
            flags.append("--share-net")
        return flags

    def wrap(
        self,
        *,
        cwd: str,
        argv0: str,
        files: Sequence[str],
        folders: Sequence[str],
        cwd_fds: Sequence[int] = (),
    ) -> list[str]:
        """The bwrap command line (up to ``--``) for one kernel launch: ``files`` are bound
        read-only, ``folders`` read-write, besides the working folder ``cwd`` — bound from
        ``cwd_fds`` when given (two descriptors of it, checked by the store: one for ``cwd``,
        one for its real path), so what is bound is the folder that was checked."""
        args = [self.bwrap, *self.namespaces()]
        if not self.filesystem:
            args += ["--bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
            return [*args, "--chdir", cwd, "--"]
        args += ["--ro-bind", "/usr", "/usr"]
        for link in _SYSTEM_LINKS:
            if os.path.islink(link):
                args += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                args += ["--ro-bind", link, link]
        args += etc_binds(names=self.etc)
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", _TMP, "--tmpfs", "/var" + _TMP]
        for env_root in python_roots(argv0):
            args += ["--ro-bind", env_root, env_root]
        for path in files:
            args += ["--ro-bind", path, path]
        for path in folders:
            args += ["--bind", path, path]
        real = os.path.realpath(cwd)
        if cwd_fds:
            args += ["--bind-fd", str(cwd_fds[0]), cwd]
            if real != cwd:  # reached through a symlink: state files are opened by real path
                args += ["--bind-fd", str(cwd_fds[1]), real]
        else:
            if real != cwd:
                args += ["--bind", real, real]
            args += ["--bind", cwd, cwd]
        args += ["--chdir", cwd]
        args += ["--remount-ro", "/"]  # the folders made to hold the mounts stay read-only
        for name, value in (
            ("HOME", _TMP),
            ("TMPDIR", _TMP),
            ("IPYTHONDIR", _TMP + "/.ipython"),
            ("MPLCONFIGDIR", _TMP + "/.matplotlib"),
        ):
            args += ["--setenv", name, value]
        return [*args, "--"]

    def probe(self) -> None:
        """Run ``true`` in the sandbox's namespaces; raise Unsupported with bwrap's words if the
        machine refuses them."""
        argv = [self.bwrap, *self.namespaces(), "--ro-bind", "/", "/", "--proc", "/proc"]
        argv += ["--dev", "/dev", "--", "true"]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unsupported(
                f"the kernel sandbox could not start bubblewrap: {exc}.",
                hint="Check the bwrap installation, or run without --sandbox and "
                "--no-kernel-network.",
            ) from exc
        if done.returncode != 0:
            raise Unsupported(
                f"this machine refuses the kernel sandbox: {done.stderr.strip()[-400:]}.",
                hint="bubblewrap needs user namespaces (sysctl kernel.unprivileged_userns_clone=1 "
                "and user.max_user_namespaces > 0, or root); otherwise run without --sandbox and "
                "--no-kernel-network.",
            )


def etc_binds(etc: str = "/etc", names: Sequence[str] = _ETC) -> list[str]:
    """The bwrap arguments that show a kernel the parts of ``/etc`` in ``names`` that exist."""
    args: list[str] = []
    for name in names:
        path = os.path.join(etc, name)
        if os.path.islink(path):
            target = os.path.realpath(path)
            if target.startswith(("/usr/", "/proc/")):
                args += ["--symlink", os.readlink(path), path]
                continue
            if not os.path.exists(target):
                continue
        elif not os.path.exists(path):
            continue
        args += ["--ro-bind", path, path]
    return args


_HOST = re.compile(r"^(\*\.)?[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")


def check_host(entry: str) -> None:
    """Refuse a network-list entry that names no host (``--kernel-net-allow``/``-deny``)."""
    if not _HOST.match(entry):
        raise InvalidArgument(
            f"{entry!r} is not a host for --kernel-net-allow/--kernel-net-deny.",
            hint="Give host names or addresses, optionally with a port: example.com, "
            "*.example.com, 10.0.0.5:8080, [::1]:8080.",
        )


def python_roots(argv0: str) -> list[str]:
    """The folders the kernel's interpreter needs besides ``/usr``: its virtual environment (the
    folder with ``pyvenv.cfg``) and its installation prefix, when outside ``/usr``."""
    exe = argv0 if os.path.isabs(argv0) else shutil.which(argv0) or argv0
    roots: list[str] = []
    for candidate in (exe, os.path.realpath(exe)):
        if not os.path.isabs(candidate):
            continue
        prefix = os.path.dirname(os.path.dirname(candidate))
        wanted = os.path.exists(os.path.join(prefix, "pyvenv.cfg")) or not prefix.startswith("/usr")
        if wanted and prefix not in ("/", "") and prefix not in roots:
            roots.append(prefix)
    for prefix in (sys.base_prefix,):
        if not prefix.startswith("/usr") and prefix not in roots and exe.startswith(prefix):
            roots.append(prefix)
    return roots


@dataclass(frozen=True)
class IsolatedPolicy(LaunchPolicy):
    """A ``LaunchPolicy`` with per-kernel rlimits and, optionally, a bwrap sandbox."""

    limits: KernelLimits = field(default_factory=KernelLimits)
    sandbox: Sandbox | None = None
    launch_files: tuple[str, ...] = ()
    launch_folders: tuple[str, ...] = ()
    launch_cwd: str | None = None
    launch_cwd_fds: tuple[int, ...] = ()
    kernel_network: bool = True  # what the settings allow (the sandbox may share less)
    allow_hosts: tuple[str, ...] = ()  # --kernel-net-allow (Deno's checks enforce it)
    deny_hosts: tuple[str, ...] = ()  # --kernel-net-deny

    def for_launch(
        self,
        *,
        cwd: str,
        connection_file: str,
        ipc_dir: str | None,
        cwd_fds: Sequence[int] = (),
    ) -> LaunchPolicy:
        if self.sandbox is None:
            return self
        return replace(
            self,
            launch_cwd=cwd,
            launch_files=(connection_file,),
            launch_folders=(ipc_dir,) if ipc_dir else (),
            launch_cwd_fds=tuple(cwd_fds),
        )

    def binds_folder(self) -> bool:
        return self.sandbox is not None and self.sandbox.filesystem

    def command(self, argv: Sequence[str]) -> list[str]:
        argv = list(argv)
        code = self.limits.kernel_code()
        if code and _is_ipykernel(argv):
            argv.append(f"--IPKernelApp.exec_lines={code}")
        prefix = list(self.argv_prefix)
        if self.sandbox is not None and argv:
            prefix += self.sandbox.wrap(
                cwd=self.launch_cwd or os.getcwd(),
                argv0=argv[0],
                files=self.launch_files,
                folders=self.launch_folders,
                cwd_fds=self.launch_cwd_fds,
            )
        return [*prefix, *argv]

    def popen_kwargs(self) -> dict[str, Any]:
        preexec: Callable[[], None] | None = self.limits.preexec()
        return {"preexec_fn": preexec} if preexec is not None else {}


def _is_ipykernel(argv: Sequence[str]) -> bool:
    return any(part in _IPYKERNEL or part.endswith("ipykernel_launcher.py") for part in argv)


def launch_policy(settings: Settings, *, probe: bool = True) -> LaunchPolicy:
    """The launch policy ``settings`` ask for; Unsupported if the machine cannot enforce it."""
    limits = KernelLimits(settings.kernel_memory, settings.kernel_cpu_time)
    limits.check()
    allow, deny = settings.kernel_net_allow, settings.kernel_net_deny
    for host in (*allow, *deny):
        check_host(host)
    isolate = settings.sandbox or settings.kernel_network is False or bool(allow or deny)
    if settings.jupyter_url and (limits.active or isolate):
        raise Unsupported(
            "kernel limits and the sandbox apply to kernels nbrelay starts itself; in live mode "
            "the Jupyter Server starts them.",
            hint="Set limits on the Jupyter Server (or its Kernel/Enterprise Gateway), or run "
            "nbrelay in file mode (--root).",
        )
    if settings.sandbox and settings.persist_sessions and settings.session_dir is not None:
        raise Unsupported(
            "a sandboxed kernel cannot write its saved session to --session-dir, which is "
            "outside the notebook's folder.",
            hint="Leave --session-dir unset: sessions are then kept next to each notebook "
            "(.nbrelay-state), where the sandboxed kernel can write.",
        )
    sandbox: Sandbox | None = None
    allowed = (
        settings.kernel_network if settings.kernel_network is not None else not settings.sandbox
    )
    # Only Deno's own checks can hold a kernel to a host list: with one, other kernels get no
    # network at all (deno.launch_policy gives Deno kernels the network the lists allow).
    network = allowed and not (allow or deny)
    if settings.sandbox or not network:
        if not sys.platform.startswith("linux"):
            raise Unsupported(
                "the kernel sandbox (--sandbox, --no-kernel-network, --kernel-net-allow/-deny) "
                "needs Linux namespaces.",
                hint="Run nbrelay on Linux, or without those options.",
            )
        found = shutil.which("bwrap")
        if found is None:
            raise Unsupported(
                "the kernel sandbox (--sandbox, --no-kernel-network, --kernel-net-allow/-deny) "
                "needs bubblewrap, and no bwrap is on PATH.",
                hint="Install it (Debian/Ubuntu: apt-get install bubblewrap), or run without "
                "those options.",
            )
        sandbox = Sandbox(found, filesystem=settings.sandbox, network=network)
        if probe:
            sandbox.probe()
    env = {**limits.environment()}
    if not limits.active and sandbox is None:
        return LaunchPolicy(keep_env=settings.kernel_env)
    return IsolatedPolicy(
        transport="ipc" if sandbox is not None else "tcp",
        env=env,
        keep_env=settings.kernel_env,
        limits=limits,
        sandbox=sandbox,
        kernel_network=allowed,
        allow_hosts=allow,
        deny_hosts=deny,
    )
