"""The spike benchmark's PostgreSQL statements: set-up, tear-down and read-back. Not the product's
queries: these only prepare the scenario and look at the outcome afterwards.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from duetime.jobdef import parse_jobs
from duetime.sharding import shard_for
from duetime.store import Store
from duetime.store.rows import job_params

__all__ = [
    "insert_future_jobs",
    "pause_jobs",
    "run_figures",
    "runs_unfinished",
    "succeeded_between",
]

# Every column of ``jobs`` but the four that differ per row comes from one validated template.
_CONSTANT_COLUMNS = (
    "tenant",
    "schedule_kind",
    "time_zone",
    "dst_gap",
    "dst_overlap",
    "start_at",
    "window_ms",
    "catch_up",
    "max_catch_up",
    "overlap",
    "target",
    "target_service",
    "max_attempts",
    "retry_initial_ms",
    "retry_multiplier",
    "retry_max_ms",
    "retry_jitter",
    "lease_ms",
    "heartbeat_ms",
    "paused",
    "version",
)


def insert_future_jobs(store: Store, count: int, target: dict[str, Any]) -> float:
    """Store ``count`` one-off jobs due about a year ahead; returns the seconds it took.

    Set-up only, not the product's write path: one ``INSERT ... SELECT ... FROM generate_series``
    whose constant columns come from a job definition validated by the project's parser, with
    ``shard_id`` computed by the project's hash (passed as an array), each job at its own second
    over the day a year ahead, then ``VACUUM ANALYZE`` so the planner's scans see fresh
    statistics, as they would on a table that grew over time, and a ``CHECKPOINT``.
    """
    started = time.monotonic()
    base = (datetime.now(UTC) + timedelta(days=365)).replace(microsecond=0)
    template = parse_jobs(
        [{"id": "future-template", "schedule": {"at": base.isoformat()}, "target": target}]
    )[0]
    params = job_params(template, base) | {"version": 1}  # 0 means "stored + 1" to jobs_apply
    ids = [f"future-{i:07d}" for i in range(1, count + 1)]
    constants = {f"c_{c}": params[c] for c in _CONSTANT_COLUMNS}
    columns = ", ".join(_CONSTANT_COLUMNS)
    values = ", ".join(
        "CAST(:c_target AS jsonb)" if c == "target" else f":c_{c}" for c in _CONSTANT_COLUMNS
    )
    statement = text(
        f"""
        INSERT INTO jobs (job_id, shard_id, schedule_expr, next_run_at, {columns})
        SELECT 'future-' || lpad(g::text, 7, '0'),
               s.shard,
               to_char((CAST(:base AS timestamptz) + g % 86400 * interval '1 second')
                       AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
               CAST(:base AS timestamptz) + g % 86400 * interval '1 second',
               {values}
        FROM generate_series(1, CAST(:count AS integer)) AS g
        JOIN unnest(CAST(:shards AS smallint[])) WITH ORDINALITY AS s(shard, i) ON s.i = g
        """
    )
    shards = [shard_for(i) for i in ids]
    # The store's connections carry a 60 s statement timeout meant for the services.
    with store.engine.begin() as conn:
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        conn.execute(statement, {"shards": shards, "base": base, "count": count, **constants})
    with store.engine.connect() as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
        autocommit.execute(text("SET statement_timeout = 0"))
        autocommit.execute(text("VACUUM ANALYZE jobs"))
        # The million rows' WAL and dirty pages are the set-up's: a checkpoint now, rather
        # than one the set-up's WAL triggers inside the measured window (max_wal_size).
        autocommit.execute(text("CHECKPOINT"))
        autocommit.execute(text("RESET statement_timeout"))
    return time.monotonic() - started


def pause_jobs(store: Store, prefix: str) -> int:
    """Pause the scenario's jobs (tear-down of the steady scenario: no further occurrences)."""
    with store.engine.begin() as conn:
        result = conn.execute(
            text("UPDATE jobs SET paused = true WHERE job_id LIKE :prefix AND NOT paused"),
            {"prefix": prefix + "%"},
        )
    return int(result.rowcount)


def runs_unfinished(store: Store, prefix: str, before: datetime) -> int:
    """Runs of the scenario scheduled before ``before`` and not in a final state."""
    with store.engine.begin() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM runs WHERE job_id LIKE :prefix"
                    " AND scheduled_for < :before AND state IN ('scheduled', 'running')"
                ),
                {"prefix": prefix + "%", "before": before},
            ).scalar_one()
        )


def succeeded_between(store: Store, prefix: str, start: datetime, end: datetime) -> int:
    """Runs of the scenario that reached ``succeeded`` with finished_at in [start, end)."""
    with store.engine.begin() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM runs WHERE job_id LIKE :prefix AND state = 'succeeded'"
                    " AND finished_at >= :start AND finished_at < :end"
                ),
                {"prefix": prefix + "%", "start": start, "end": end},
            ).scalar_one()
        )


def run_figures(store: Store, prefix: str, start: datetime, end: datetime) -> dict[str, Any]:
    """What PostgreSQL says about the runs scheduled in [start, end): how many, in which state,
    how long before its slot each was published (worst case), when the last one finished."""
    where = "job_id LIKE :prefix AND scheduled_for >= :start AND scheduled_for < :end"
    params = {"prefix": prefix + "%", "start": start, "end": end}
    with store.engine.begin() as conn:
        states = {
            row.state: int(row.n)
            for row in conn.execute(
                text(f"SELECT state, count(*) AS n FROM runs WHERE {where} GROUP BY state"), params
            )
        }
        row = conn.execute(
            text(
                "SELECT min(extract(epoch FROM scheduled_for - published_at)) AS ahead,"
                " count(*) FILTER (WHERE published_at IS NULL) AS unpublished,"
                " max(finished_at) AS last_finished,"
                " count(*) FILTER (WHERE attempt > 1) AS retried"
                f" FROM runs WHERE {where}"
            ),
            params,
        ).one()
    return {
        "states": states,
        "runs": sum(states.values()),
        "planned_ahead_s": None if row.ahead is None else round(float(row.ahead), 3),
        "unpublished": int(row.unpublished),
        "last_finished_at": None if row.last_finished is None else row.last_finished.timestamp(),
        "retried": int(row.retried),
    }
