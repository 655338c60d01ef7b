"""Running one call sequence against an original server and against nbrelay, and comparing.

A profile's sequence is a list of ``Step``s (a tool, its arguments, a label, whether it is an
error case). ``play`` sends them one by one through the official MCP client and keeps, for each,
its **outcome**: the error flag, the result's value (a text block that is JSON is parsed, so the
same object printed with other spacing is the same value) and its structured content. Outcomes
are masked before they are kept or compared (``Mask``): ids and times become ``<id>`` and
``<time>``, the fixture folder becomes ``<root>``, and the wording of an error becomes
``<message>`` (each server words its errors its own way; the flag, where the error is reported
and the shape around it are compared).

A step is *identical* when the masked outcomes are equal; the original's structured content is
compared only when the original sends one (a client of an original that sends none does not read
it). A profile lists the steps where it differs on purpose (the original is broken or unsafe
there) in ``accepted``, each with its reason; ``compare`` reports both kinds.

Transcripts (``transcripts/<profile>.json``) keep an original's masked outcomes, recorded once by
``record.py``: facts about how the original behaves, not its code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client
from mcp_types import CallToolResult, ImageContent, TextContent

TRANSCRIPTS = Path(__file__).parent / "transcripts"

ID = "<id>"
TIME = "<time>"
MESSAGE = "<message>"
ROOT = "<root>"
# The reports of the comparisons run, printed at the end of the run (conftest.py).
FIGURES: list[str] = []

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_ISO_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


@dataclass(frozen=True)
class Step:
    """One call: ``label`` names it in reports (unique within a sequence); ``error_case`` marks
    the calls that test a failure (out of range, missing file, wrong type, empty notebook)."""

    label: str
    tool: str
    args: Mapping[str, Any]
    error_case: bool = False

    def call(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": dict(self.args)}


@dataclass(frozen=True)
class Mask:
    """What differs between two runs of the same server: ``ids`` and ``times`` name the keys
    whose values are masked (also inside strings: UUIDs and ISO times anywhere); ``messages`` the
    keys whose non-null strings are error wording; ``roots`` the fixture folders (and their real
    paths) that become ``<root>``; ``replace`` extra (pattern, replacement) pairs for strings."""

    ids: frozenset[str] = frozenset({"id", "cell_id", "session_id", "file_id", "kernel_id"})
    id_lists: frozenset[str] = frozenset({"cell_ids"})
    times: frozenset[str] = frozenset({"last_modified", "created", "last_activity", "modified"})
    messages: frozenset[str] = frozenset()
    roots: tuple[str, ...] = ()
    replace: tuple[tuple[str, str], ...] = ()

    def with_roots(self, *roots: Path) -> Mask:
        found: list[str] = []
        for root in roots:
            for form in (str(root), str(root.resolve())):
                if form not in found:
                    found.append(form)
        found.sort(key=len, reverse=True)
        return Mask(self.ids, self.id_lists, self.times, self.messages, tuple(found), self.replace)

    def string(self, text: str) -> str:
        for root in self.roots:
            text = text.replace(root, ROOT)
        text = _UUID.sub(ID, text)
        text = _ISO_TIME.sub(TIME, text)
        for pattern, replacement in self.replace:
            text = re.sub(pattern, replacement, text)
        return text

    def __call__(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            if key in self.id_lists:
                return [ID if x is not None else None for x in value]
            return [self(v, key) for v in value]
        if key in self.messages and isinstance(value, str) and value:
            return MESSAGE
        if key in self.ids and value is not None and not isinstance(value, (bool, int, float)):
            return ID
        if key in self.times and value is not None:
            return TIME
        if isinstance(value, str):
            return self.string(value)
        return value


def outcome(result: CallToolResult, mask: Mask) -> dict[str, Any]:
    """The masked facts of one result: ``error``, ``value`` and (when sent) ``structured``."""
    blocks: list[Any] = []
    for block in result.content:
        if isinstance(block, TextContent):
            try:
                blocks.append(json.loads(block.text))
            except ValueError:
                blocks.append(block.text)
        elif isinstance(block, ImageContent):
            blocks.append({"image": block.mime_type})
        else:
            blocks.append({"content": block.type})
    value: Any = blocks[0] if len(blocks) == 1 else blocks
    got: dict[str, Any] = {"error": bool(result.is_error)}
    got["value"] = MESSAGE if result.is_error else mask(value)
    if result.structured_content is not None and not result.is_error:
        got["structured"] = mask(result.structured_content)
    return got


async def play(client: Client, steps: Iterable[Step], mask: Mask) -> list[dict[str, Any]]:
    """Send each step and keep its masked outcome. An exception the client raises (a protocol
    error rather than a tool result) is an error outcome too."""
    got = []
    for step in steps:
        try:
            result = await client.call_tool(step.tool, dict(step.args))
        except Exception as exc:  # a protocol error (not a tool result) is a fact to compare
            got.append({"error": True, "value": MESSAGE, "protocol_error": type(exc).__name__})
            continue
        got.append(outcome(result, mask))
    return got


# -- transcripts ------------------------------------------------------------------------------


@dataclass
class Transcript:
    """An original's recorded answers to a sequence, with where they came from."""

    profile: str
    original: str
    recorded_with: str
    steps: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return TRANSCRIPTS / f"{self.profile}.json"

    def save(self) -> None:
        TRANSCRIPTS.mkdir(exist_ok=True)
        data = {
            "profile": self.profile,
            "original": self.original,
            "recorded_with": self.recorded_with,
            "tools": self.tools,
            "steps": self.steps,
            "files": self.files,
        }
        text = json.dumps(data, indent=1, ensure_ascii=False, sort_keys=False) + "\n"
        self.path.write_text(text, encoding="utf-8")

    @classmethod
    def load(cls, profile: str) -> Transcript:
        data = json.loads((TRANSCRIPTS / f"{profile}.json").read_text(encoding="utf-8"))
        return cls(
            profile=data["profile"],
            original=data["original"],
            recorded_with=data["recorded_with"],
            steps=data["steps"],
            tools=data.get("tools", []),
            files=data.get("files", {}),
        )

    def outcomes(self, steps: Sequence[Step]) -> list[dict[str, Any]]:
        """The recorded outcomes, after checking the transcript is of exactly these calls."""
        recorded = [
            {"label": s["label"], **{k: s[k] for k in ("tool", "args")}} for s in self.steps
        ]
        wanted = [{"label": s.label, **s.call()} for s in steps]
        if recorded != wanted:
            raise AssertionError(
                f"transcripts/{self.profile}.json is of another call sequence; record it again "
                "(see record.py)"
            )
        return [s["outcome"] for s in self.steps]


def transcript_steps(steps: Sequence[Step], outcomes: Sequence[dict[str, Any]]) -> list[Any]:
    return [
        {"label": s.label, **s.call(), "outcome": o} for s, o in zip(steps, outcomes, strict=True)
    ]


# -- comparing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kept:
    """A difference kept on purpose: ``reason`` says why; ``only`` (when given) confines it to
    what it names: both outcomes, passed through ``only``, must then be equal (so the rest of the
    step is still compared)."""

    reason: str
    only: Callable[[Any], Any] | None = None


def blank(pattern: str, replacement: str = "<kept>") -> Callable[[Any], Any]:
    """An ``only`` for ``Kept`` that blanks ``pattern`` (a multi-line regex) in every string."""
    compiled = re.compile(pattern, re.M)

    def apply(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: apply(v) for k, v in value.items()}
        if isinstance(value, list):
            return [apply(v) for v in value]
        return compiled.sub(replacement, value) if isinstance(value, str) else value

    return apply


@dataclass
class Comparison:
    profile: str
    steps: list[Step]
    identical: list[str]
    accepted: dict[str, str]  # label -> reason, for steps that differ on purpose
    differing: dict[str, tuple[Any, Any]]  # label -> (original, nbrelay), unexpected

    @property
    def figure(self) -> str:
        return f"{len(self.identical)} / {len(self.steps)}"

    def report(self) -> str:
        lines = [
            f"differential {self.profile}: {self.figure} steps identical"
            f" ({len(self.accepted)} accepted differences, {len(self.differing)} unexpected)"
        ]
        for label, reason in self.accepted.items():
            lines.append(f"  accepted  {label}: {reason}")
        for label, (theirs, ours) in self.differing.items():
            lines.append(f"  DIFFERS   {label}")
            lines.append(f"    original: {json.dumps(theirs, ensure_ascii=False)[:600]}")
            lines.append(f"    nbrelay:  {json.dumps(ours, ensure_ascii=False)[:600]}")
            for where, a, b in differences(theirs, ours)[:6]:
                shown = [json.dumps(v, ensure_ascii=False)[:200] for v in (a, b)]
                lines.append(f"    at {where}: original {shown[0]}, nbrelay {shown[1]}")
        return "\n".join(lines)


def differences(a: Any, b: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """Where two outcomes differ: (path, original's value, nbrelay's value); a key one side
    lacks shows as ``<absent>``."""
    if isinstance(a, dict) and isinstance(b, dict):
        found: list[tuple[str, Any, Any]] = []
        for key in [*a, *(k for k in b if k not in a)]:
            found += differences(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{where}.{key}")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [(where or ".", a, b)]


def _comparable(theirs: dict[str, Any], ours: dict[str, Any]) -> tuple[Any, Any]:
    ours = dict(ours)
    if "structured" not in theirs:
        ours.pop("structured", None)
    ours.pop("protocol_error", None)
    theirs = {k: v for k, v in theirs.items() if k != "protocol_error"}
    return theirs, ours


def compare(
    profile: str,
    steps: Sequence[Step],
    original: Sequence[dict[str, Any]],
    nbrelay: Sequence[dict[str, Any]],
    accepted: Mapping[str, str | Kept],
) -> Comparison:
    labels = [s.label for s in steps]
    assert len(set(labels)) == len(labels), "step labels must be unique"
    unknown = set(accepted) - set(labels)
    assert not unknown, f"accepted differences name no step: {sorted(unknown)}"
    result = Comparison(profile, list(steps), [], {}, {})
    for step, theirs, ours in zip(steps, original, nbrelay, strict=True):
        a, b = _comparable(theirs, ours)
        kept = accepted.get(step.label)
        if isinstance(kept, str):
            kept = Kept(kept)
        if a == b:
            result.identical.append(step.label)
        elif kept is not None and (kept.only is None or kept.only(a) == kept.only(b)):
            result.accepted[step.label] = kept.reason
        else:
            result.differing[step.label] = (a, b)
    return result


def check_sequence(steps: Sequence[Step], *, minimum: int = 30) -> None:
    """A sequence worth comparing: at least ``minimum`` calls, a third of them error cases."""
    assert len(steps) >= minimum, f"{len(steps)} steps, fewer than {minimum}"
    errors = sum(s.error_case for s in steps)
    assert errors * 3 >= len(steps), f"only {errors} of {len(steps)} steps are error cases"


def notebook_facts(path: Path) -> Any:
    """What a notebook file holds, without ids: each cell's type, source, execution count and
    outputs (for comparing the files a sequence leaves)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"<unreadable: {type(exc).__name__}>"
    cells = []
    for cell in nb.get("cells", []):
        source = cell.get("source", "")
        facts = {"cell_type": cell.get("cell_type"), "source": "".join(source)}
        if cell.get("cell_type") == "code":
            facts["execution_count"] = cell.get("execution_count")
            facts["outputs"] = cell.get("outputs")
        cells.append(facts)
    return cells
