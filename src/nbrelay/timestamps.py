"""Timestamps as the protocols want them: ISO 8601 in UTC with a ``Z``, one formatter for all
(and its reader, for the times a Jupyter Server sends)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

TimeSpec = Literal["seconds", "milliseconds", "microseconds"]


def utc_iso(ts: float, *, timespec: TimeSpec = "milliseconds") -> str:
    """``ts`` (seconds since the epoch) as ``2026-01-02T03:04:05.678Z``, cut (not rounded) to
    ``timespec``."""
    moment = dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def epoch_seconds(value: Any) -> float:
    """An ISO 8601 time (a contents model's ``created``, ``last_modified``) as epoch seconds;
    0 if absent or unreadable."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
