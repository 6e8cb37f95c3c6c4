"""The dispatcher's estimate of its clock's offset from the database clock, on a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from duetime.clock_offset import ClockOffset

S = 1000  # ms


def test_no_samples_means_no_estimate_and_no_correction() -> None:
    offset = ClockOffset()
    assert offset.estimate_ms is None
    assert offset.correction_ms == 0
    assert not offset.skewed


def test_the_smallest_difference_bounds_the_offset() -> None:
    """Transit only adds: the minimum of receive - send is the tightest bound on the offset."""
    offset = ClockOffset()
    base = 1_800_000_000_000
    # A host 2 s ahead of the database; transits of 300, 4 and 90 ms.
    for transit in (300, 4, 90):
        sent = base + transit * 10
        offset.observe(sent + 2 * S + transit, sent)
    assert offset.estimate_ms == 2 * S + 4
    assert offset.correction_ms == 2 * S + 4
    assert offset.skewed


def test_a_host_behind_the_database_gets_a_negative_correction() -> None:
    offset = ClockOffset()
    offset.observe(1_000_000 - 1500 + 7, 1_000_000)  # 1.5 s behind, 7 ms transit
    assert offset.estimate_ms == -1493
    assert offset.correction_ms == -1493  # due instants are judged 1.493 s later locally


def test_small_estimates_are_not_corrected() -> None:
    """On one host the estimate is only the smallest transit: correcting it adds lateness."""
    offset = ClockOffset(threshold=timedelta(milliseconds=50))
    offset.observe(10_000 + 30, 10_000)
    assert offset.estimate_ms == 30
    assert offset.correction_ms == 0
    offset.observe(10_100 - 51, 10_100)
    assert offset.correction_ms == -51
    assert not offset.skewed


def test_old_samples_age_out_of_the_window() -> None:
    """A stepped host clock is noticed once the samples from before the step have expired."""
    offset = ClockOffset(window=timedelta(seconds=60), bucket=timedelta(seconds=10))
    t = 1_000_000_000
    offset.observe(t + 2 * S, t)  # 2 s ahead
    offset.observe(t + 30 * S + 5, t + 30 * S)  # fixed by NTP: 5 ms transit
    assert offset.estimate_ms == 5
    # Later records all say 2 s ahead again (the host clock was stepped forward).
    offset.observe(t + 45 * S + 2 * S, t + 45 * S)
    assert offset.estimate_ms == 5  # the 5 ms sample still counts
    offset.observe(t + 100 * S + 2 * S, t + 100 * S)
    assert offset.estimate_ms == 2 * S  # ... until it left the window
    offset.expire(t + 200 * S)
    assert offset.estimate_ms is None  # nothing left: no correction at all


def test_backlog_records_never_lower_the_bound() -> None:
    offset = ClockOffset()
    offset.observe(5_000_000 + 3, 5_000_000)
    offset.observe(5_000_100, 4_000_000)  # read 1000 s after it was sent: a replayed backlog
    assert offset.estimate_ms == 3


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        ClockOffset(window=timedelta(seconds=1), bucket=timedelta(seconds=10))
    with pytest.raises(ValueError):
        ClockOffset(threshold=timedelta(seconds=2), warn_at=timedelta(seconds=1))
