"""Capacity-aware windows: runs spread under the target's rate, deterministically."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.capacity import WindowedRun, epoch_second, place
from duetime.schedule import due_at

MIDNIGHT = datetime(2026, 12, 4, 0, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=10)


def _runs(count: int, target: str = "api", window: timedelta = WINDOW) -> list[WindowedRun]:
    runs = []
    for i in range(count):
        job_id = f"job-{i:05d}"
        runs.append(
            WindowedRun(
                run_id=uuid.uuid5(uuid.NAMESPACE_URL, job_id),
                target_service=target,
                scheduled_for=MIDNIGHT,
                due_at=due_at(job_id, MIDNIGHT, window, None),
                window=window,
            )
        )
    return runs


def test_ten_thousand_midnight_jobs_stay_under_the_rate() -> None:
    runs = _runs(10_000)
    by_hash = Counter(epoch_second(r.due_at) for r in runs)
    assert max(by_hash.values()) > 25  # a hash alone leaves peaks
    placed = place(runs, {}, {"api": 25.0})
    per_second = Counter(epoch_second(d) for d in placed.values())
    assert max(per_second.values()) <= 25
    for run in runs:  # every run inside its window
        assert MIDNIGHT <= placed[run.run_id] < MIDNIGHT + WINDOW


def test_existing_load_is_avoided_and_a_full_window_keeps_the_hash_place() -> None:
    runs = _runs(3, window=timedelta(seconds=2))
    busy = {("api", epoch_second(MIDNIGHT)): 1, ("api", epoch_second(MIDNIGHT) + 1): 0}
    placed = place(runs, busy, {"api": 1.0})
    seconds = sorted(epoch_second(d) for d in placed.values())
    # Second 0 is taken already: one run gets second 1, the other two find the window full.
    assert seconds.count(epoch_second(MIDNIGHT) + 1) >= 1
    assert busy[("api", epoch_second(MIDNIGHT))] + busy[("api", epoch_second(MIDNIGHT) + 1)] == 4


def test_targets_without_a_rate_keep_their_hash_place() -> None:
    runs = _runs(50, target="free")
    placed = place(runs, {}, {"api": 1.0})
    assert all(placed[r.run_id] == r.due_at for r in runs)


@settings(max_examples=50, deadline=None)
@given(count=st.integers(1, 400), rate=st.integers(1, 30), window_s=st.integers(1, 90))
def test_same_runs_same_forecast_same_places(count: int, rate: int, window_s: int) -> None:
    runs = _runs(count, window=timedelta(seconds=window_s))
    first = place(runs, {}, {"api": float(rate)})
    again = place(list(reversed(runs)), {}, {"api": float(rate)})
    assert first == again
    per_second = Counter(epoch_second(d) for d in first.values())
    if count <= rate * window_s:  # it fits: never above the rate
        assert max(per_second.values()) <= rate
