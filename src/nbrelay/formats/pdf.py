"""PDF export: nbconvert's HTML printed by headless Chromium, run as a child process in its own
process group with a deadline, killed on timeout or cancellation, on a page whose
Content-Security-Policy and host-resolver rules keep it off the network and off local files (a
notebook's HTML output cannot pull ``file:///`` content into the PDF).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import anyio
import anyio.to_thread

from nbrelay.errors import StoreError, Unsupported

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_CSP = (
    '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
    "img-src data:; style-src 'unsafe-inline' data:; font-src data:; media-src data:\">"
)
_STDERR_TAIL = 600


def _sealed(html: str) -> str:
    """The page with a Content-Security-Policy that lets in only inline data: no network, no
    local files, no scripts."""
    match = re.search(r"<head[^>]*>", html, flags=re.IGNORECASE)
    at = match.end() if match else 0
    return html[:at] + _CSP + html[at:]


def find_browser(configured: Path | None) -> str:
    """The Chromium executable: the configured one, or the first of ``BROWSERS`` on PATH."""
    if configured is not None:
        if not os.access(configured, os.X_OK):
            raise Unsupported(
                f"the browser {configured} (--browser) is not an executable file.",
                hint="Point --browser at Chromium, or leave it unset to use chromium from PATH.",
            )
        return str(configured)
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise Unsupported(
        "PDF export needs Chromium, and none was found on PATH.",
        hint="Install it (Debian/Ubuntu: apt-get install chromium) or set --browser; the other "
        "formats work without it.",
    )


# How nbrelay (and its tests) start headless Chromium on a machine without a display: no GPU, no
# sandbox (it runs as the current user, often root in containers), and no background requests.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


async def print_pdf(html: str, browser: str, seconds: float) -> bytes:
    work = await anyio.to_thread.run_sync(lambda: tempfile.mkdtemp(prefix="nbrelay-pdf-"))
    try:
        page = Path(work) / "notebook.html"
        target = Path(work) / "notebook.pdf"
        await anyio.to_thread.run_sync(page.write_text, _sealed(html), "utf-8")
        argv = [
            browser,
            *CHROMIUM_FLAGS,
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--no-pdf-header-footer",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={work}/profile",
            f"--print-to-pdf={target}",
            page.as_uri(),
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": work,
            "XDG_CONFIG_HOME": work,
            "XDG_CACHE_HOME": work,
            "LANG": "C.UTF-8",
        }
        stderr = await _run_bounded(argv, env, seconds)
        data = await anyio.to_thread.run_sync(_read_if_exists, target)
        if not data or not data.startswith(b"%PDF"):
            raise StoreError(
                "Chromium did not produce a PDF.",
                hint=f"Its last words: {stderr[-_STDERR_TAIL:].strip() or '(none)'}",
            )
        return data
    finally:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(work, ignore_errors=True))


def _read_if_exists(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


async def _run_bounded(argv: list[str], env: dict[str, str], seconds: float) -> str:
    """Run a child in its own process group; kill the group on timeout or cancellation."""
    process = await anyio.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    chunks: list[bytes] = []

    async def drain() -> None:
        if process.stderr is None:
            return
        async for chunk in process.stderr:
            chunks.append(chunk)
            if sum(map(len, chunks)) > 64_000:
                del chunks[: len(chunks) // 2]

    try:
        with anyio.fail_after(seconds):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                await process.wait()
    except TimeoutError:
        raise StoreError(
            f"Chromium did not finish printing the PDF within {seconds:g} s.",
            hint="Retry; a very large notebook may need a longer --export-timeout.",
        ) from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await process.wait()
        await process.aclose()
    return b"".join(chunks).decode("utf-8", "replace")


# Characters every cell adds to an export at the least (its JSON keys, HTML wrappers, fences).
