"""Run windows: a stable, documented hash places each job inside its window."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from schedule_kit import utc

from duetime.schedule import due_at, stable_hash64, window_offset


def test_hash_is_the_documented_sha256_prefix() -> None:
    # Pinned values, so that another language can check its implementation against them.
    assert stable_hash64("job-1") == 174151894793320618
    assert stable_hash64("nightly-billing") == 15442842655637577151
    assert window_offset("job-1", timedelta(minutes=30)) == timedelta(milliseconds=1720618)
    assert window_offset("nightly-billing", timedelta(minutes=1)) == timedelta(milliseconds=57151)


def test_offset_is_the_same_in_another_process() -> None:
    # Python's hash() is salted per process; this must not be.
    code = (
        "from datetime import timedelta; from duetime.schedule import window_offset; "
        "print(window_offset('tenant-a/job-42', timedelta(hours=1)) // timedelta(milliseconds=1))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    expected = window_offset("tenant-a/job-42", timedelta(hours=1))
    assert int(out) == expected // timedelta(milliseconds=1)


def test_no_window_means_on_time() -> None:
    slot = utc(2025, 1, 1, 2)
    assert due_at("job", slot, timedelta(0), None) == slot
    assert window_offset("job", timedelta(microseconds=999)) == timedelta(0)
    assert window_offset("job", timedelta(seconds=-5)) == timedelta(0)


def test_window_is_clamped_below_the_next_occurrence() -> None:
    slot = utc(2025, 1, 1, 2)
    following = slot + timedelta(seconds=10)
    due = due_at("job-1", slot, timedelta(minutes=30), following)
    assert slot <= due < following
    assert due == slot + window_offset("job-1", timedelta(seconds=10))
    # Less than a millisecond of room: on time.
    assert due_at("job-1", slot, timedelta(hours=1), slot + timedelta(microseconds=10)) == slot


@settings(max_examples=300, deadline=None)
@given(
    st.text(min_size=0, max_size=64),
    st.integers(0, 7 * 86_400_000),
    st.one_of(st.none(), st.integers(1, 86_400_000)),
)
def test_due_at_is_deterministic_and_inside_the_window(
    job_id: str, window_ms: int, gap_ms: int | None
) -> None:
    slot = utc(2025, 3, 30, 1)
    window = timedelta(milliseconds=window_ms)
    following = None if gap_ms is None else slot + timedelta(milliseconds=gap_ms)
    due = due_at(job_id, slot, window, following)
    assert due == due_at(job_id, slot, window, following)
    assert slot <= due
    assert due - slot < window or (window_ms == 0 and due == slot)
    if following is not None:
        assert due < following
    assert (due - slot) % timedelta(milliseconds=1) == timedelta(0)
