"""Every option nbrelay takes, declared once: name, type, default, help and bounds.

Its command-line flag (``--output-budget``), environment variable (``NBRELAY_OUTPUT_BUDGET``)
and TOML key (``output_budget``) all come from its name; ``Settings`` takes its defaults from
here, ``nbrelay serve --help`` and the options page's table (docs/options.md) are built from the same list, and a
test keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROFILES = (
    "canonical",
    "ipynb-mcp",
    "notebook-lr",
    "jupyterlab-rtc",
    "mcp-jupyter",
    "srcbook",
    "jupyter-mcp-server",
)


@dataclass(frozen=True)
class Option:
    """One setting: its name, type, default and help; ``lo``/``hi`` bound numbers."""

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    secret: bool = False
    pattern: str | None = None  # what each item of a list must be (a regular expression)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "NBRELAY_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("root", Path, Path("."), "Folder whose notebooks are served (file mode)."),
    Option("profile", str, "canonical", "Tool set to expose.", choices=PROFILES),
    Option(
        "tools",
        list,
        (),
        "Comma-separated tool names to expose (default: all of the profile's tools), or a "
        "preset of the canonical profile: read, edit (read + editing), run (edit + kernels).",
    ),
    Option("read_only", bool, False, "Expose only tools that read; no tool can change a notebook."),
    Option(
        "no_execute",
        bool,
        False,
        "Leave out every tool that runs code; the path rules are then the whole boundary.",
    ),
    Option(
        "output_schemas",
        bool,
        False,
        "Declare each tool's output JSON schema in tools/list (results always carry "
        "structuredContent; the schemas add about 40% to the context every agent pays).",
    ),
    Option(
        "output_budget",
        int,
        6000,
        "Characters of cell output one tool result may carry before head+tail truncation.",
        lo=200,
        hi=1_000_000,
    ),
    Option("undo_depth", int, 50, "Changes per notebook that undo can revert.", lo=0, hi=10_000),
    Option(
        "shared_state",
        bool,
        False,
        "Keep what each client last read, its undo history and its MCP tasks on disk, so "
        "several nbrelay processes on one root (replicas behind one address) guard, undo and "
        "answer tasks alike. Off: kept in memory (one process; an edit then costs no extra "
        "write).",
    ),
    Option(
        "lock_timeout",
        float,
        10.0,
        "Seconds to wait for another process's lock on a notebook before giving up.",
        lo=0.1,
        hi=600,
    ),
    Option(
        "cache_mb",
        int,
        160,
        "Megabytes of notebooks file mode keeps parsed in memory (an edited one counts twice), "
        "the least recently used dropped first and read again when next used; 0 keeps only "
        "the notebook in use.",
        lo=0,
        hi=1_048_576,
    ),
    Option(
        "lock_dir",
        Path,
        None,
        "Folder for cross-process lock files (default: a per-user folder in the temp dir).",
    ),
    Option(
        "browser",
        Path,
        None,
        "Chromium executable that prints PDF exports (default: chromium on PATH).",
    ),
    Option(
        "export_timeout",
        float,
        120.0,
        "Seconds one export or import conversion (nbconvert, Chromium) may take.",
        lo=5,
        hi=3600,
    ),
    Option("http", bool, False, "Serve streamable HTTP at /mcp instead of stdio."),
    Option(
        "host",
        str,
        "127.0.0.1",
        "Address --http listens on; off loopback a token is required.",
    ),
    Option("port", int, 8765, "Port --http listens on (0 picks a free one).", lo=0, hi=65535),
    Option(
        "token_file",
        Path,
        None,
        "File with the bearer token(s) for --http, one per line; created with a new random "
        "token if missing. $NBRELAY_TOKEN is the alternative.",
    ),
    Option(
        "allowed_hosts",
        list,
        (),
        "Extra Host names clients use to reach --http (loopback names and --host are allowed).",
    ),
    Option(
        "allowed_origins",
        list,
        (),
        "Browser origins allowed to call --http besides loopback ones, e.g. https://lab.example.",
    ),
    Option(
        "max_http_sessions",
        int,
        100,
        "Most MCP sessions open at once over --http (each client holds one; idle ones end after "
        "30 minutes); a client that would open another is refused with HTTP 503.",
        lo=1,
        hi=100_000,
    ),
    Option(
        "http_timeout",
        float,
        30.0,
        "Seconds an --http client may take to send a request's headers, or pause within its "
        "body, and may leave its connection idle between requests; slower connections are "
        "closed (a request in progress gets 408). A body may take ten times this in all.",
        lo=1,
        hi=3600,
    ),
    Option(
        "execution_timeout",
        float,
        600.0,
        "Seconds a cell may run before it is interrupted, when execute gives no timeout.",
        lo=1,
        hi=86_400,
    ),
    Option(
        "max_execution_timeout",
        float,
        7200.0,
        "The longest timeout (seconds) an execute call may ask for.",
        lo=1,
        hi=604_800,
    ),
    Option(
        "execution_wait",
        float,
        30.0,
        "Seconds execute waits for results before returning a handle to poll, when the call "
        "gives no wait.",
        lo=0,
        hi=3600,
    ),
    Option(
        "interrupt_grace",
        float,
        5.0,
        "Seconds a kernel has to stop after an interrupt before it is restarted.",
        lo=0.5,
        hi=600,
    ),
    Option(
        "kernel_idle_timeout",
        float,
        900.0,
        "Seconds without activity after which a notebook's kernel is shut down, its session "
        "kept for the next run (default 900: 15 minutes; 0: never).",
        lo=0,
        hi=604_800,
    ),
    Option(
        "kernel_pool",
        int,
        1,
        "Warm kernels (of the default kernelspec) kept ready for notebooks that have none yet.",
        lo=0,
        hi=8,
    ),
    Option(
        "max_sessions",
        int,
        0,
        "Most kernels (notebook sessions) running at once; another is refused (0: no limit).",
        lo=0,
        hi=10_000,
    ),
    Option(
        "max_kernels",
        int,
        None,
        "Most kernels running at once (the warm pool aside); a notebook that needs another waits "
        "while the least recently used idle one is stopped, its session kept (its variables "
        "saved with --persist-sessions). Default: 8 for the kernels nbrelay starts on this "
        "machine, no limit for a Jupyter Server's or a gateway's; 0: no limit.",
        lo=0,
        hi=10_000,
    ),
    Option(
        "persist_sessions",
        bool,
        False,
        "Save a Python kernel's variables (with dill) when it is stopped for idleness, and "
        "restore them when the notebook runs again.",
    ),
    Option(
        "session_dir",
        Path,
        None,
        "Folder for saved kernel states (default: .nbrelay-state next to each notebook).",
    ),
    Option(
        "kernel_memory",
        int,
        None,
        "Megabytes of memory (address space) each kernel may use (default: no limit).",
        lo=64,
        hi=16_777_216,
    ),
    Option(
        "kernel_cpu_time",
        int,
        None,
        "Seconds of CPU time each kernel may use before it is stopped (default: no limit).",
        lo=1,
        hi=31_536_000,
    ),
    Option(
        "sandbox",
        bool,
        False,
        "Run kernels in a bubblewrap sandbox: the notebook's folder read-write, the system "
        "read-only, nothing else; no network unless --kernel-network.",
    ),
    Option(
        "kernel_network",
        bool,
        None,
        "Let kernels use the network (default: yes, but no with --sandbox); "
        "--no-kernel-network cuts it off even without --sandbox, but then kernels still reach "
        "every Unix socket on the machine (a local proxy, Docker, an SSH agent), which can give "
        "the network back: add --sandbox to close that.",
    ),
    Option(
        "kernel_net_allow",
        list,
        (),
        "Hosts TypeScript/JavaScript (Deno) kernels may reach, comma-separated (example.com, "
        "*.example.com, 10.0.0.5:8080), even with --no-kernel-network; other kernels, which "
        "cannot be held to a list, get no network.",
    ),
    Option(
        "kernel_net_deny",
        list,
        (),
        "Hosts Deno kernels may never reach (same forms); other kernels then get no network.",
    ),
    Option(
        "kernel_env",
        list,
        (),
        "Environment variables kernels get: comma-separated names and shell-style patterns, "
        "e.g. PATH,HOME,LANG,LC_*; a credential-like variable passes only if named exactly "
        "(default: all but nbrelay's settings and credential-like ones).",
        pattern=r"[A-Za-z0-9_*?\[\]!-]+",
    ),
    Option(
        "cell_output_limit",
        int,
        1_000_000,
        "Characters of text output (printed text, errors) stored per cell; beyond it the start "
        "and the end are kept, with a notice of what was dropped.",
        lo=1000,
        hi=100_000_000,
    ),
    Option(
        "cell_display_limit",
        int,
        50_000_000,
        "Characters of displays (images, HTML, other rich output) stored per cell; a display "
        "past it is dropped, with a notice.",
        lo=1000,
        hi=1_000_000_000,
    ),
    Option(
        "jupyter_url",
        str,
        None,
        "Live mode: the Jupyter Server (JupyterLab) whose notebooks to serve, e.g. "
        "http://127.0.0.1:8888/; its token comes from $JUPYTER_TOKEN or --jupyter-token-file.",
    ),
    Option(
        "jupyter_token_file",
        Path,
        None,
        "Live mode: a file holding the Jupyter Server's token (instead of $JUPYTER_TOKEN).",
    ),
    Option(
        "kernel_gateway_url",
        str,
        None,
        "File mode: run kernels on this Jupyter Kernel Gateway or Enterprise Gateway instead of "
        "locally; its token comes from $JUPYTER_TOKEN or --jupyter-token-file.",
    ),
    Option(
        "live_save_wait",
        bool,
        False,
        "Live mode: every edit also waits until the Jupyter Server has saved the file (slower). "
        "By default an edit returns once the server has it and the file is saved about half a "
        "second after the last edit; save_notebook waits for it on demand.",
    ),
    Option(
        "agent_name",
        str,
        "nbrelay agent",
        "Live mode: the name people see for the agent among JupyterLab's online collaborators.",
    ),
    Option(
        "notebook",
        str,
        "notebook.nblr",
        "Profile notebook-lr: the current notebook its tools act on, under the root (created by "
        "the first add_cell or save_notebook; .nblr or .ipynb); load_notebook switches it.",
    ),
)

OPTION_BY_NAME = {o.name: o for o in OPTIONS}
URL_OPTIONS = frozenset({"jupyter_url", "kernel_gateway_url"})
