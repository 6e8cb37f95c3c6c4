"""Overlap policies at the claim, on real PostgreSQL: skip, buffer_one, a retry in progress,
and two workers claiming two runs of one job at the same instant."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from duetime.store import Store
from duetime.store.attempts import ClaimRequest
from tests.fixtures.jobs import apply_http_job

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=30)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = Store(database_url, pool_size=4)
    with store.tx() as tx:
        today = datetime.now(UTC).date()  # and yesterday: runs minutes ago may fall on it
        tx.runs_ensure_partition(today - timedelta(days=1))
        tx.runs_ensure_partition(today)
    yield store
    store.close()


def _run(store: Store, job_id: str, minutes_ago: int) -> tuple[uuid.UUID, datetime]:
    run_id = uuid.uuid4()
    with store.engine.begin() as conn:
        scheduled_for = conn.execute(
            text(
                "INSERT INTO runs (run_id, job_id, tenant, target_service, scheduled_for, due_at,"
                " max_attempts, published_at) SELECT :id, :job, 'default', 'example.com',"
                " date_trunc('second', now()) - make_interval(mins => :ago),"
                " date_trunc('second', now()) - make_interval(mins => :ago), 3, now()"
                " RETURNING scheduled_for"
            ),
            {"id": run_id, "job": job_id, "ago": minutes_ago},
        ).scalar_one()
    return run_id, scheduled_for


def _claim(store: Store, job_id: str, run: tuple[uuid.UUID, datetime], attempt: int = 1) -> bool:
    request = ClaimRequest(run[0], run[1], attempt, uuid.uuid4(), LEASE, job_id=job_id)
    return bool(store.runs_claim_batch("worker-1", [request]))


def _row(store: Store, run: tuple[uuid.UUID, datetime]) -> Any:
    with store.engine.begin() as conn:
        return conn.execute(
            text(
                "SELECT state, attempt, last_error, buffered_at, published_at, due_at"
                " FROM runs WHERE run_id = :id"
            ),
            {"id": run[0]},
        ).one()


def _end(store: Store, run: tuple[uuid.UUID, datetime], state: str = "succeeded") -> None:
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE runs SET state = :state, lease_token = NULL, lease_expires_at = NULL,"
                " finished_at = CASE WHEN :state = 'scheduled' THEN NULL ELSE now() END"
                " WHERE run_id = :id"
            ),
            {"id": run[0], "state": state},
        )


def test_allow_runs_overlapping_runs(store: Store) -> None:
    apply_http_job(store, "free", "allow")
    first, second = _run(store, "free", 2), _run(store, "free", 1)
    assert _claim(store, "free", first) and _claim(store, "free", second)


def test_skip_records_the_run_as_skipped_while_the_previous_one_runs(store: Store) -> None:
    apply_http_job(store, "report", "skip")
    first, second, third = (_run(store, "report", m) for m in (3, 2, 1))
    assert _claim(store, "report", first)
    assert not _claim(store, "report", second)
    row = _row(store, second)
    assert row.state == "skipped" and "overlap" in row.last_error
    _end(store, first)
    assert _claim(store, "report", third)  # the job is free again


def test_a_retry_in_progress_counts_as_running(store: Store) -> None:
    apply_http_job(store, "report", "skip")
    first, second = _run(store, "report", 2), _run(store, "report", 1)
    assert _claim(store, "report", first)
    _end(store, first, state="scheduled")  # attempt 1 failed, attempt 2 waits for its backoff
    assert not _claim(store, "report", second)
    assert _row(store, second).state == "skipped"
    assert _claim(store, "report", first, attempt=2)  # the retry itself is not blocked


def test_buffer_one_keeps_one_waiting_and_skips_the_rest(store: Store) -> None:
    apply_http_job(store, "sync", "buffer_one")
    first, second, third, fourth = (_run(store, "sync", m) for m in (4, 3, 2, 1))
    assert _claim(store, "sync", first)
    assert not _claim(store, "sync", second)
    waiting = _row(store, second)
    assert waiting.state == "scheduled" and waiting.buffered_at is not None
    assert waiting.published_at is None  # the outbox offers it again shortly
    assert not _claim(store, "sync", third)
    assert _row(store, third).state == "skipped"
    assert not _claim(store, "sync", second)  # offered again while the first still runs
    assert _row(store, second).state == "scheduled"
    _end(store, first)
    # A newer run arriving first finds one waiting: skipped; the waiting one goes next.
    assert not _claim(store, "sync", fourth)
    assert _row(store, fourth).state == "skipped"
    assert _claim(store, "sync", second)
    row = _row(store, second)
    assert row.state == "running" and row.buffered_at is None


def test_two_workers_never_run_two_runs_of_a_skip_job_at_once(store: Store) -> None:
    apply_http_job(store, "exclusive", "skip")
    for round_ in range(5):
        runs = [_run(store, "exclusive", 100 * round_ + m) for m in (2, 1)]
        results: list[bool] = []
        barrier = threading.Barrier(2)

        def claim(
            run: tuple[uuid.UUID, datetime], barrier: threading.Barrier, results: list[bool]
        ) -> None:
            barrier.wait()
            results.append(_claim(store, "exclusive", run))

        threads = [threading.Thread(target=claim, args=(run, barrier, results)) for run in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == [False, True]
        states = sorted(_row(store, run).state for run in runs)
        assert states == ["running", "skipped"]
        for run in runs:
            if _row(store, run).state == "running":
                _end(store, run)
