"""The cold tier's bucket math (pure): which hour a job's next run falls in, and whether it is cold.

A job whose next run lies beyond the hot horizon (default 1 h) is *cold*: its row carries the
hour bucket of its next run (``jobs.cold_bucket``), and the planner's due index, which covers hot
rows only, does not hold it. The planner's loader makes every bucket that starts before
``now + horizon`` hot ahead of time (one transaction per bucket). The rules:

- a bucket is the UTC hour ``[b, b + 1 h)``, counted from 2000-01-01T00:00Z (SQL:
  ``date_bin('1 hour', next_run_at, '2000-01-01 00:00:00+00')``, the same origin the planner's
  histogram uses), so zones with 30- or 45-minute offsets do not shift the grid;
- a write puts a job cold when its bucket **starts** at or after ``now + horizon``
  (``cold_bucket_for``), which is exactly the condition under which the loader would not load
  that bucket yet (``load_before``): a write and the loader agree at every instant, so a job is
  never written cold into a bucket the loader already passed;
- the loader is stateless: each round it loads every cold bucket that starts before
  ``now + horizon``, past ones included, so a row it skipped (locked by a writer, or written
  while it ran) is loaded by the next round.

Migration 0015 defines the SQL twin of ``cold_bucket_for`` (``duetime_cold_bucket``), used by
every statement that writes ``next_run_at``; tests/integration/test_cold_tier.py checks that the
two agree. docs/planner.md ("The cold tier") has the design note.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from duetime.errors import ConfigError

__all__ = [
    "BUCKET",
    "DEFAULT_HOT_HORIZON",
    "MIN_HOT_HORIZON",
    "bucket_of",
    "cold_bucket_for",
    "load_before",
    "validate_hot_horizon",
]

BUCKET = timedelta(hours=1)
ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)
DEFAULT_HOT_HORIZON = timedelta(hours=1)
# The planner plans runs up to its lookahead ahead (30 s, up to 10 min for a spike); a job must
# be hot well before then. A writer with a shorter horizon than the planner's loader is safe
# (the loader's next round loads what it wrote), as long as it is not shorter than this.
MIN_HOT_HORIZON = timedelta(minutes=15)


def bucket_of(instant: datetime) -> datetime:
    """The start of the UTC hour ``instant`` falls in (an aware datetime in UTC)."""
    if instant.tzinfo is None:
        raise ValueError("bucket_of needs an aware datetime")
    return ORIGIN + ((instant - ORIGIN) // BUCKET) * BUCKET


def cold_bucket_for(
    next_run_at: datetime | None, now: datetime, horizon: timedelta
) -> datetime | None:
    """The bucket a job written at ``now`` is kept cold in, or ``None`` when it is hot.

    Hot when it has no next run, or when its bucket starts before ``now + horizon`` (the loader
    would load that bucket already).
    """
    if next_run_at is None:
        return None
    bucket = bucket_of(next_run_at)
    return bucket if bucket >= now + horizon else None


def load_before(now: datetime, horizon: timedelta) -> datetime:
    """The loader at ``now`` makes hot every cold bucket that starts before this instant."""
    return now + horizon


def validate_hot_horizon(horizon: timedelta) -> timedelta:
    if horizon < MIN_HOT_HORIZON:
        raise ConfigError(
            f"the hot horizon must be at least {int(MIN_HOT_HORIZON.total_seconds())} s, "
            f"not {horizon.total_seconds():g} s"
        )
    return horizon
