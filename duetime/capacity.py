"""Capacity-aware windows: place windowed runs where their target's forecast load fits its rate.

A job with ``window_seconds`` may start anywhere in its window. Placed by a hash alone, ten
thousand ``0 0 * * *`` jobs with a 10-minute window land on about 17 runs a second on average,
but unevenly, and on top of whatever else is due at those seconds. When the job's target has a
rate limit, the planner instead walks the window's whole seconds starting from the job's hash
offset (so different jobs start in different places) and takes the first second whose forecast
load (runs already planned for the target in that second) is below the rate; the run keeps the
sub-second part of its hash offset. Only when every second of the window is full does the run
stay at its hash offset (the window cannot hold it; the dispatcher's throttle then delays it).

The decision is a pure function of the runs, in a fixed order, and the forecast: the same jobs
planned against the same forecast get the same places (the planner's transaction writes the
forecast it used, so a batch planned again after a rollback finds the same state).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["WindowedRun", "epoch_second", "place"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_second(instant: datetime) -> int:
    """The whole Unix second ``instant`` falls in."""
    return math.floor((instant - _EPOCH).total_seconds())


@dataclass(frozen=True)
class WindowedRun:
    """A run whose due instant may move inside ``[scheduled_for, scheduled_for + window)``.

    ``due_at`` is its hash placement (``duetime.schedule.due_at``), which fixes where the search
    starts and the sub-second part; ``window`` is the effective window (already narrowed to the
    time before the job's next occurrence).
    """

    run_id: uuid.UUID
    target_service: str
    scheduled_for: datetime
    due_at: datetime
    window: timedelta


def place(
    runs: Iterable[WindowedRun],
    load: MutableMapping[tuple[str, int], int],
    rates: Mapping[str, float],
) -> dict[uuid.UUID, datetime]:
    """The due instant of each run; ``load`` (target, epoch second) -> runs is updated in place.

    Runs are placed in (scheduled_for, run_id) order. A run whose target has no rate in
    ``rates`` keeps its ``due_at`` and only adds to the load.
    """
    placed: dict[uuid.UUID, datetime] = {}
    for run in sorted(runs, key=lambda r: (r.scheduled_for, r.run_id.bytes)):
        rate = rates.get(run.target_service)
        seconds = math.floor(run.window.total_seconds())
        due = run.due_at
        if rate is not None and seconds >= 1:
            capacity = max(1, math.floor(rate))
            offset = due - run.scheduled_for
            start = min(seconds - 1, math.floor(offset.total_seconds()))
            fraction = offset - timedelta(seconds=math.floor(offset.total_seconds()))
            base = epoch_second(run.scheduled_for)
            for step in range(seconds):
                k = (start + step) % seconds
                if load.get((run.target_service, base + k), 0) < capacity:
                    due = run.scheduled_for + timedelta(seconds=k) + fraction
                    break
        key = (run.target_service, epoch_second(due))
        load[key] = load.get(key, 0) + 1
        placed[run.run_id] = due
    return placed
