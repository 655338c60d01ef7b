"""One formatter for every ISO 8601 time nbrelay writes (UTC, ``Z``), and its reader."""

from __future__ import annotations

import pytest

from nbrelay.timestamps import epoch_seconds, utc_iso
from nbrelay.tools.results import iso

MOMENT = 1_767_323_045.678901  # 2026-01-02T03:04:05.678901Z


def test_each_precision_cuts_and_never_rounds() -> None:
    assert utc_iso(MOMENT) == "2026-01-02T03:04:05.678Z"
    assert utc_iso(MOMENT, timespec="seconds") == "2026-01-02T03:04:05Z"
    assert utc_iso(MOMENT, timespec="microseconds") == "2026-01-02T03:04:05.678901Z"
    assert utc_iso(MOMENT + 0.9999, timespec="seconds") == "2026-01-02T03:04:06Z"
    # A whole second keeps its fraction: every time of one kind has the same length.
    assert utc_iso(1_767_323_045.0, timespec="microseconds") == "2026-01-02T03:04:05.000000Z"


def test_tool_results_show_whole_seconds_and_nothing_for_no_time() -> None:
    assert iso(MOMENT) == "2026-01-02T03:04:05Z"
    assert iso(0.0) == "1970-01-01T00:00:00Z"
    assert iso(None) == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:05.678901Z", MOMENT),
        ("2026-01-02T04:04:05.678901+01:00", MOMENT),
        ("", 0.0),
        (None, 0.0),
        ("yesterday", 0.0),
    ],
)
def test_a_servers_times_read_back_as_epoch_seconds(value: object, expected: float) -> None:
    assert epoch_seconds(value) == pytest.approx(expected, abs=1e-6)
    if expected:
        assert epoch_seconds(utc_iso(expected, timespec="microseconds")) == pytest.approx(
            expected, abs=1e-6
        )
