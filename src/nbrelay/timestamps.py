"""Timestamps as the protocols want them: ISO 8601 in UTC with a ``Z``, one formatter for all."""

from __future__ import annotations

import datetime as dt
from typing import Literal

TimeSpec = Literal["seconds", "milliseconds", "microseconds"]


def utc_iso(ts: float, *, timespec: TimeSpec = "milliseconds") -> str:
    """``ts`` (seconds since the epoch) as ``2026-01-02T03:04:05.678Z``, cut (not rounded) to
    ``timespec``."""
    moment = dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")
