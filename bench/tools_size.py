"""Bytes of each profile's ``tools/list`` answer as sent (what every agent pays each turn).

Run: ``python -m bench.tools_size`` (add ``--tools read`` etc. to measure a preset).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from nbrelay.config import Settings, expand_presets
from nbrelay.errors import InvalidArgument
from nbrelay.server import PROFILES, build_server


def listing(tools: list[Any]) -> bytes:
    """The ``tools/list`` result as the server serialises it on the wire."""
    dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return json.dumps({"tools": dumped}, separators=(",", ":")).encode()


async def sizes(root: Path, tools: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """(bytes, tool count) per profile; with ``tools`` (names or a preset) only the profiles
    that have them."""
    out: dict[str, tuple[int, int]] = {}
    for profile in PROFILES:
        try:
            only = expand_presets(tools, profile)
        except InvalidArgument:
            continue  # presets name canonical tools
        settings = Settings(root=root, profile=profile, lock_dir=root / ".locks", tools=only)
        async with Client(build_server(settings)) as client:
            listed = (await client.list_tools()).tools
        out[profile] = (len(listing(listed)), len(listed))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", default="", help="a preset or comma-separated tool names")
    args = parser.parse_args()
    tools = tuple(args.tools.split(",")) if args.tools else ()
    with tempfile.TemporaryDirectory() as tmp:
        found = anyio.run(lambda: sizes(Path(tmp), tools))
    print(f"{'profile':<16} {'tools':>5} {'bytes':>7}")
    for profile, (size, count) in found.items():
        print(f"{profile:<16} {count:>5} {size:>7}")


if __name__ == "__main__":
    main()
