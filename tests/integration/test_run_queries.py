"""Statements over the runs that run every few seconds or on every dashboard view: they count
every waiting run, in the outbox or published, and read them through the partial indexes on
waiting runs, never by scanning a day's partition."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, text

from duetime.store import Store, fanout
from duetime.store.dashboard import QueueDepth, queue_depth
from duetime.store.queries import query


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = Store(database_url, pool_size=2)
    today = datetime.now(UTC).date()
    with store.tx() as tx:  # runs due a minute either side of midnight land in the next day's
        for day in (today - timedelta(days=1), today, today + timedelta(days=1)):
            tx.runs_ensure_partition(day)
    yield store
    store.close()


def _runs(store: Store, tenant: str, state: str, published: bool, due_s: int, n: int) -> None:
    """``n`` runs of ``tenant`` due ``due_s`` seconds from the database clock."""
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, due_at,"
                " state, attempt, max_attempts, lease_token, lease_expires_at, published_at,"
                " started_at)"
                " SELECT gen_random_uuid(), 'job-' || gen_random_uuid(), :tenant,"
                " 'svc', date_trunc('second', now()) + make_interval(secs => :due),"
                " date_trunc('second', now()) + make_interval(secs => :due), :state,"
                " CASE WHEN :state = 'scheduled' THEN 0 ELSE 1 END, 3,"
                " CASE WHEN :state = 'running' THEN gen_random_uuid() END,"
                " CASE WHEN :state = 'running' THEN now() + interval '1 minute' END,"
                " CASE WHEN :published THEN now() END,"
                " CASE WHEN :state <> 'scheduled' THEN date_trunc('second', now())"
                " + make_interval(secs => :due + 0.05) END"
                " FROM generate_series(1, :n) AS i"
            ),
            {"tenant": tenant, "state": state, "published": published, "due": due_s, "n": n},
        )


def test_queue_depth_counts_waiting_runs_in_the_outbox_and_published(store: Store) -> None:
    _runs(store, "acme", "scheduled", False, -5, 1)  # due, still in the outbox
    _runs(store, "acme", "scheduled", True, -5, 2)  # due, published, not claimed
    _runs(store, "acme", "scheduled", False, 120, 3)  # ahead, not yet published
    _runs(store, "acme", "scheduled", True, 60, 4)  # ahead, published
    _runs(store, "acme", "running", True, -2, 5)
    _runs(store, "acme", "succeeded", True, -10, 6)  # finished: not in the queue
    _runs(store, "globex", "scheduled", True, -5, 7)
    with store.engine.begin() as conn:
        assert queue_depth(conn, "acme") == QueueDepth(due_waiting=3, planned_ahead=7, running=5)
        assert queue_depth(conn, None) == QueueDepth(due_waiting=10, planned_ahead=7, running=5)


def test_the_forecast_counts_planned_runs_in_the_outbox_and_published(store: Store) -> None:
    _runs(store, "acme", "scheduled", False, 600, 3)
    _runs(store, "acme", "scheduled", True, 600, 4)
    _runs(store, "acme", "succeeded", True, 600, 5)  # not waiting
    with store.engine.begin() as conn:
        horizon = conn.execute(text("SELECT now() + interval '1 hour'")).scalar_one()
        rows = conn.execute(query("api_forecast_planned"), {"tenant": "acme", "horizon": horizon})
        assert sum(r.runs for r in rows) == 7


def _plan(conn: Connection, name: str, params: dict[str, Any]) -> str:
    rows = conn.execute(text("EXPLAIN " + query(name).text), params).all()
    return "\n".join(r[0] for r in rows)


def test_periodic_queries_read_waiting_runs_through_indexes_not_the_partition(
    store: Store,
) -> None:
    # A day's partition is mostly finished runs (hundreds of millions in production); the
    # statements that run every few seconds or on every dashboard view must not scan it.
    _runs(store, "acme", "succeeded", True, -30, 20_000)
    _runs(store, "acme", "scheduled", False, -5, 20)
    _runs(store, "acme", "scheduled", True, 60, 20)
    _runs(store, "acme", "running", True, -2, 20)
    _runs(store, "acme", "dead", True, -60, 20)
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE runs"))
        horizon = conn.execute(text("SELECT now() + interval '1 hour'")).scalar_one()
        full = set(
            conn.execute(
                text(
                    "SELECT relname FROM pg_class WHERE relname LIKE 'runs_p%'"
                    " AND relkind = 'r' AND reltuples > 1000"
                )
            ).scalars()
        )
        plans = {
            "dashboard_queue_depth": _plan(conn, "dashboard_queue_depth", {"tenant": None}),
            "dashboard_dead_recent": _plan(
                conn, "dashboard_dead_recent", {"tenant": None, "window_seconds": 86400.0}
            ),
            "api_forecast_planned": _plan(
                conn, "api_forecast_planned", {"tenant": None, "horizon": horizon}
            ),
            "runs_release_lateness": _plan(
                conn, "runs_release_lateness", {"window_seconds": 60.0, "limit": 1000}
            ),
            "fanout_lateness_ms": _plan(
                conn,
                "fanout_lateness_ms",
                {"tenant": None, "window_seconds": 3600.0, "sample": 1000},
            ),
            "runs_get_unpublished": _plan(
                conn, "runs_get_unpublished", {"horizon": horizon, "limit": 5000}
            ),
        }
    assert full  # the finished runs' partition
    for name, plan in plans.items():
        # (Empty partitions may be scanned: there is nothing to read.)
        scanned = set(re.findall(r"Seq Scan on (runs_p\d+)", plan))
        assert not scanned & full, f"{name}:\n{plan}"


def test_lateness_reads_the_latest_runs_of_its_window_up_to_its_sample(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fanout, "LATENESS_SAMPLE", 5)
    _runs(store, "acme", "succeeded", True, -100, 10)
    _runs(store, "acme", "succeeded", True, -10, 5)
    with store.engine.begin() as conn:
        # The older runs started 5 s late; the five latest 50 ms late.
        conn.execute(
            text(
                "UPDATE runs SET started_at = due_at + interval '5 s'"
                " WHERE due_at < now() - interval '50 s'"
            )
        )
        lateness = fanout.lateness_merged([conn], None, 3600.0)
    assert lateness.runs == 5
    assert lateness.max_seconds == pytest.approx(0.05)
