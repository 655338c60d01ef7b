"""The notice a cell keeps past ``--cell-output-limit`` says exactly how much was dropped, however
the kernel printed it: one huge print (cut in the kernel before it is sent), many fast writes
that the kernel sends as one message, or a loop of lines.

Before the fix a fast print of megabytes left "nothing dropped" in the notice: what the kernel's
own cap cut was not counted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from tests.helpers import call, notebook, write_notebook
from tests.kernels.conftest import serve, settings_for

pytestmark = pytest.mark.anyio

LIMIT = 10_000
# (code, how many characters it prints)
CELLS = [
    ("print('x' * 500_000)", 500_001),
    ("import sys\nfor i in range(50):\n    sys.stdout.write('y' * 10_000)", 500_000),
    ("for i in range(60_000):\n    print(i)", sum(len(str(i)) + 1 for i in range(60_000))),
    ("print('z' * 9_000)\nprint('w' * 3_000)", 12_002),
]
NOTICE = re.compile(
    r"\n… \[output past the [\d,]+-character limit stored per cell: (?:([\d,]+) characters"
    r"(?: \([\d,]+ of them cut by the kernel[^)]*\))? dropped|nothing dropped)"
    r"(?:; the last ([\d,]+) characters follow)?\] …\n"
)
KERNEL_MARK = re.compile(r"\n… \[[\d,]+ characters cut: over [\d,]+ printed at once\] …\n")


async def test_the_notice_counts_everything_dropped(root: Path, tmp_path: Path) -> None:
    write_notebook(root / "nb.ipynb", notebook(*(code for code, _ in CELLS)))
    async with serve(settings_for(root, tmp_path, cell_output_limit=LIMIT)) as client:
        with anyio.fail_after(120):
            await call(client, "execute", path="nb.ipynb", cells=[":"], wait=100)
    stored = json.loads((root / "nb.ipynb").read_text())
    for (code, printed), cell in zip(CELLS, stored["cells"], strict=True):
        text = "".join("".join(o["text"]) for o in cell["outputs"] if o["output_type"] == "stream")
        notice = NOTICE.search(text)
        assert notice is not None, (code, text[-300:])
        kept = KERNEL_MARK.sub("", text[: notice.start()] + text[notice.end() :])
        assert int(notice[2].replace(",", "")) == len(text) - notice.end()
        # "nothing dropped" only when the start and the kept end hold every character printed
        # (two prints that reach nbrelay as separate messages on a busy machine, with nothing
        # for the kernel's cap to cut); otherwise the count is exact.
        dropped = 0 if notice[1] is None else int(notice[1].replace(",", ""))
        assert dropped == printed - len(kept), (code, notice[0])
        if printed > LIMIT + 20_000:  # more than the start and the kept end can hold
            assert dropped > 0, (code, notice[0])


# Floods shaped like the ones that lost their end: fast lines that reach nbrelay as one flush over
# the limit (1.2 MB in 12,000 lines at the default limit kept only its last line), and lines each
# longer than the limit (1 GB in 1 MB lines kept 68 characters). Scaled to a 50,000 limit.
TAIL_LIMIT = 50_000
FLOODS = [
    ("for i in range(1_200):\n    print(str(i).rjust(99, 'x'))", 1_200, 100),
    ("for i in range(20):\n    print(str(i).rjust(99_999, 'x'))", 20, 100_000),
]


async def test_a_cut_output_keeps_its_start_and_last_characters(root: Path, tmp_path: Path) -> None:
    write_notebook(root / "nb.ipynb", notebook(*(code for code, _, _ in FLOODS)))
    settings = settings_for(root, tmp_path, cell_output_limit=TAIL_LIMIT)
    async with serve(settings) as client:
        with anyio.fail_after(120):
            await call(client, "execute", path="nb.ipynb", cells=[":"], wait=100)
    stored = json.loads((root / "nb.ipynb").read_text())
    kept_tail = min(20_000, TAIL_LIMIT // 2)
    for (code, count, width), cell in zip(FLOODS, stored["cells"], strict=True):
        printed = "".join(str(i).rjust(width - 1, "x") + "\n" for i in range(count))
        text = "".join("".join(o["text"]) for o in cell["outputs"] if o["output_type"] == "stream")
        notice = NOTICE.search(text)
        assert notice is not None, (code, text[-300:])
        assert notice[2] is not None, notice[0]
        assert int(notice[2].replace(",", "")) == kept_tail, notice[0]
        assert text[notice.end() :] == printed[-kept_tail:], code
        assert text[: notice.start()] == printed[: TAIL_LIMIT - kept_tail], code
