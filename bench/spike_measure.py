"""Figures of one spike-benchmark scenario from what the recorders saw. Pure: no I/O.

Definitions (bench/reports/spike.md repeats them):

* start lateness: the first handler start of a run (HTTP request received, or Kafka record
  received by the target's consumer) minus its scheduled_for;
* release lateness: when the dispatcher released the run (CreateTime of its ``runs.ready``
  record; for a Kafka-target run emitted directly onto the job's topic, that record's CreateTime)
  minus its due_at;
* lost: expected runs that never reached the target; duplicates: handler starts beyond one per
  (run_id, attempt).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.spike_recorder import Arrival

__all__ = [
    "Release",
    "duplicates",
    "first_starts",
    "percentiles",
    "release_lateness",
    "timeline",
]


@dataclass(frozen=True, slots=True)
class Release:
    """A run record's publication: its CreateTime and the due time it carries (epoch s)."""

    created_at: float
    due_at: float


def percentiles(values_ms: Sequence[float]) -> dict[str, float] | None:
    """``{"p50", "p99", "max"}`` in ms (nearest rank), or None without values."""
    if not values_ms:
        return None
    ordered = sorted(values_ms)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": round(rank(0.50), 1), "p99": round(rank(0.99), 1), "max": round(ordered[-1], 1)}


def first_starts(arrivals: Iterable[Arrival]) -> dict[str, Arrival]:
    """The first handler start of each run, by run_id."""
    by_run: dict[str, Arrival] = {}
    for a in arrivals:
        seen = by_run.get(a.run_id)
        if seen is None or a.arrived_at < seen.arrived_at:
            by_run[a.run_id] = a
    return by_run


def duplicates(arrivals: Iterable[Arrival]) -> int:
    counts = Counter((a.run_id, a.attempt) for a in arrivals)
    return sum(n - 1 for n in counts.values())


def release_lateness(
    starts: Mapping[str, Arrival], releases: Mapping[str, Release]
) -> tuple[list[float], int, int]:
    """Release lateness (ms) of every started run, plus how many came from the ``runs.ready``
    records and how many from the target records (the direct path for Kafka targets).

    A started run with neither (an HTTP run without a ``runs.ready`` record) is left out.
    """
    values: list[float] = []
    from_ready = from_target = 0
    for run_id, start in starts.items():
        release = releases.get(run_id)
        if release is not None:
            values.append((release.created_at - release.due_at) * 1000)
            from_ready += 1
        elif start.created_at is not None:
            values.append((start.created_at - start.scheduled_for) * 1000)
            from_target += 1
    return values, from_ready, from_target


def timeline(starts: Iterable[Arrival], origin: float, bin_s: float) -> list[list[float]]:
    """Lateness over time: ``[t, count, p50, p99, max]`` per bin of arrival time since
    ``origin`` (s), lateness in ms. Small enough to keep in the JSON and plot from it."""
    bins: dict[int, list[float]] = {}
    for a in starts:
        bins.setdefault(math.floor((a.arrived_at - origin) / bin_s), []).append(
            (a.arrived_at - a.scheduled_for) * 1000
        )
    rows: list[list[float]] = []
    for index in sorted(bins):
        figures = percentiles(bins[index])
        assert figures is not None
        rows.append(
            [
                round(index * bin_s, 3),
                len(bins[index]),
                figures["p50"],
                figures["p99"],
                figures["max"],
            ]
        )
    return rows
