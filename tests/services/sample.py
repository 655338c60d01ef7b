"""Sample notebooks for the service and resource tests."""

from __future__ import annotations

import base64
import struct
import zlib

from nbrelay.notebook.model import Notebook, new_notebook
from tests.helpers import code, markdown


def png(w: int = 3, h: int = 2) -> bytes:
    """A tiny valid red PNG."""
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        body = tag + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


PNG_B64 = base64.b64encode(png()).decode("ascii")


def report() -> Notebook:
    """Markdown, a printing cell, an image cell and an HTML table, with outputs."""
    nb = new_notebook(
        [
            markdown("# Quarterly report\nRevenue grew.", "m0"),
            code(
                "total = 6 * 7\nprint('total is', total)",
                "c1",
                [{"output_type": "stream", "name": "stdout", "text": "total is 42\n"}],
            ),
            code(
                "plot()",
                "c2",
                [
                    {
                        "output_type": "display_data",
                        "data": {"image/png": PNG_B64, "text/plain": "<Figure size 3x2>"},
                        "metadata": {},
                    }
                ],
            ),
            code(
                "table",
                "c3",
                [
                    {
                        "output_type": "execute_result",
                        "execution_count": 3,
                        "data": {
                            "text/html": "<table><tr><td>alpha</td><td>17</td></tr></table>",
                            "text/plain": "alpha 17",
                        },
                        "metadata": {},
                    }
                ],
            ),
        ]
    )
    nb.data["metadata"]["language_info"] = {"name": "python"}
    return nb
