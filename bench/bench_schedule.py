"""Benchmark the schedule hot path: next fires for 100k jobs due at midnight.

Run from the repository root::

    python -m bench.bench_schedule

It prints the figures and writes ``bench/reports/schedule.md``. Scenarios:

* ``midnight batch``: 100,000 jobs over 50 distinct (expression, zone, DST rule) specs, every job
  of a spec having just fired at the same slot. This is the planner at 00:00 and the figure the
  target (>= 200,000 next-fires/s) applies to. The cache is cold: compiling is included.
* ``midnight batch, warm cache``: the same with schedules compiled by an earlier batch.
* ``scattered afters``: every job has its own ``after`` (no two equal), visited in descending
  order so that no answer can be reused: the raw speed of the DST-aware search, and the worst
  case for the batch API.
* ``plan_due per job``: the planner's per-job call for on-time jobs (one run + next fire).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from duetime.schedule import (
    TZDATA_VERSION,
    ScheduleCache,
    ScheduleSpec,
    compile_schedule,
    next_fires,
    plan_due,
)

__all__ = ["main", "run"]

TARGET_PER_SECOND = 200_000
REPORT_PATH = Path(__file__).resolve().parent / "reports" / "schedule.md"

_EXPRESSIONS = (
    "0 0 * * *",
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 9 * * MON-FRI",
    "0 0 1 * *",
    "15,45 * * * *",
    "0 0 * * SUN",
    "*/30 * * * * *",
    "0 0 13 * FRI",
)
_ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe")


@dataclass(frozen=True)
class Result:
    """One scenario's measurement."""

    name: str
    operations: int
    seconds: float

    @property
    def per_second(self) -> float:
        """Operations per second."""
        return self.operations / self.seconds


def distinct_specs(count: int) -> list[ScheduleSpec]:
    """Return ``count`` distinct specs cycling through expressions, zones and DST rules."""
    specs = []
    for index in range(count):
        expression = _EXPRESSIONS[index % len(_EXPRESSIONS)]
        zone = _ZONES[(index // len(_EXPRESSIONS)) % len(_ZONES)]
        variant = index // (len(_EXPRESSIONS) * len(_ZONES))
        gap = "skip" if variant % 2 else "shift"
        overlap = "twice" if variant // 2 % 2 else "once"
        specs.append(ScheduleSpec("cron", expression, zone, gap, overlap))  # type: ignore[arg-type]
    return specs


def _latest_slot(spec: ScheduleSpec, base: datetime) -> datetime:
    """The spec's latest occurrence at or before ``base``, searched in growing windows."""
    schedule = compile_schedule(spec)
    for span in (timedelta(minutes=1), timedelta(hours=1), timedelta(days=1), timedelta(days=400)):
        latest = None
        cursor = schedule.next_after(base - span)
        while cursor is not None and cursor <= base:
            latest, cursor = cursor, schedule.next_after(cursor)
        if latest is not None:
            return latest
    raise ValueError(f"{spec} does not fire in the year before {base}")


def midnight_workload(jobs: int, distinct: int) -> list[tuple[ScheduleSpec, datetime]]:
    """Jobs that all just fired at their spec's latest slot at or before 2025-03-30 00:00 UTC."""
    base = datetime(2025, 3, 30, tzinfo=UTC)
    slots = [(spec, _latest_slot(spec, base)) for spec in distinct_specs(distinct)]
    return [slots[index % distinct] for index in range(jobs)]


def scattered_workload(jobs: int, distinct: int) -> list[tuple[ScheduleSpec, datetime]]:
    """Jobs whose ``after`` instants all differ (three days around a DST change), descending.

    Descending order defeats every reuse of earlier answers, so each one is a full search.
    """
    base = datetime(2025, 3, 29, tzinfo=UTC)
    specs = distinct_specs(distinct)
    return [
        (specs[index % distinct], base + timedelta(milliseconds=index * 2_593))
        for index in reversed(range(jobs))
    ]


def _best(function: Callable[[], object], repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return min(timings)


def run(jobs: int = 100_000, distinct: int = 50, repeat: int = 3) -> list[Result]:
    """Measure every scenario; each figure is the best of ``repeat`` runs."""
    midnight = midnight_workload(jobs, distinct)
    scattered = scattered_workload(jobs, distinct)
    warm = ScheduleCache()
    next_fires(midnight, warm)
    # Sanity: the batch answers equal the one-by-one answers.
    sample = midnight[:distinct] + scattered[: distinct * 4]
    assert next_fires(sample) == [compile_schedule(s).next_after(a) for s, a in sample]

    def plan_all() -> None:
        for spec, slot in midnight:
            schedule = warm.get(spec)
            plan_due(schedule, slot, slot + timedelta(seconds=30), "once", 1)

    return [
        Result("midnight batch (cold cache)", jobs, _best(lambda: next_fires(midnight), repeat)),
        Result(
            "midnight batch, warm cache", jobs, _best(lambda: next_fires(midnight, warm), repeat)
        ),
        Result("scattered afters (cold cache)", jobs, _best(lambda: next_fires(scattered), repeat)),
        Result("plan_due per job, warm cache", jobs, _best(plan_all, repeat)),
    ]


def render(results: list[Result], jobs: int, distinct: int) -> str:
    """Return the markdown report."""
    headline = results[0]
    verdict = "meets" if headline.per_second >= TARGET_PER_SECOND else "misses"
    lines = [
        "# Schedule benchmark",
        "",
        "Written by `python -m bench.bench_schedule` (bench/bench_schedule.py).",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        f"- python: {sys.version.split()[0]} ({platform.python_implementation()})",
        f"- tzdata: {TZDATA_VERSION}",
        f"- workload: {jobs:,} jobs over {distinct} distinct specs "
        "(10 expressions x 5 zones incl. DST zones), best of 3",
        "",
        "| scenario | operations | seconds | per second |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r.name} | {r.operations:,} | {r.seconds:.3f} | {r.per_second:,.0f} |" for r in results
    ]
    lines += [
        "",
        f"Target: >= {TARGET_PER_SECOND:,} next-fires/s for the midnight batch: "
        f"**{verdict}** it ({headline.per_second:,.0f}/s).",
        "",
        "The midnight batch computes each distinct (spec, after) pair once, because jobs that",
        "share a spec and fell due together share `after`. The scattered scenario has no such",
        "sharing (and defeats the per-schedule memo of the last answer), so it shows the raw",
        "speed of the DST-aware search per job.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark, print the figures and write bench/reports/schedule.md."""
    jobs, distinct = 100_000, 50
    results = run(jobs, distinct)
    for result in results:
        print(f"{result.name:<32} {result.per_second:>12,.0f}/s  ({result.seconds:.3f} s)")
    report = render(results, jobs, distinct)
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    REPORT_PATH.write_text(report, encoding="utf-8")
    print(f"next fires at midnight: {results[0].per_second:,.0f}/s (report: {REPORT_PATH})")


if __name__ == "__main__":
    main()
