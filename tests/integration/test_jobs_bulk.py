"""Bulk job writes on PostgreSQL: versions, tombstones, duplicates, chunks; per item results."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from duetime.events import JobTombstone
from duetime.jobdef import parse_job
from duetime.model import JobDefinition
from duetime.sharding import shard_for
from duetime.store import Store
from duetime.store import jobs as jobs_module
from duetime.store.jobs import jobs_apply

pytestmark = pytest.mark.integration


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = Store(database_url, pool_size=1)
    yield store
    store.close()


def _job(job_id: str, version: int | None = None, **extra: Any) -> JobDefinition:
    data: dict[str, Any] = {
        "id": job_id,
        "schedule": {"cron": "0 0 * * *", "time_zone": "Asia/Kolkata"},
        "target": {"http": {"url": "https://example.com/hook", "headers": {"X-Team": "a"}}},
        **extra,
    }
    if version is not None:
        data["version"] = version
    return parse_job(data)


def _stored(store: Store) -> dict[str, Any]:
    with store.engine.begin() as conn:
        rows = conn.execute(
            text("SELECT job_id, version, tenant, paused, next_run_at, schedule_expr FROM jobs")
        ).all()
    return {r.job_id: r for r in rows}


def test_bulk_apply_resolves_versions_tombstones_duplicates_and_stale_items(
    store: Store,
) -> None:
    with store.tx() as tx:
        first = jobs_apply(tx, [_job("keep", 5), _job("bump"), _job("doomed", 2), _job("cron")])
    assert [w.action for w in first] == ["created"] * 4
    before = _stored(store)

    items: list[JobDefinition | JobTombstone] = [
        _job("keep", 4, tenant="stale"),  # older than stored 5: unchanged
        _job("bump", tenant="team-b"),  # version 0: stored 1 + 1
        _job("bump", tenant="team-c"),  # the same job again in one batch: 3
        JobTombstone("doomed", 3),
        JobTombstone("absent", 1),
        _job("cron", 2, paused=True),  # same schedule: next_run_at kept
        _job("fresh"),
    ]
    with store.tx() as tx:
        writes = jobs_apply(tx, items)
    assert [(w.job_id, w.action, w.version) for w in writes] == [
        ("keep", "unchanged", 4),
        ("bump", "updated", 2),
        ("bump", "updated", 3),
        ("doomed", "deleted", 3),
        ("absent", "not_found", 1),
        ("cron", "updated", 2),
        ("fresh", "created", 1),
    ]
    after = _stored(store)
    assert set(after) == {"keep", "bump", "cron", "fresh"}
    assert (after["keep"].version, after["keep"].tenant) == (5, "default")
    assert (after["bump"].version, after["bump"].tenant) == (3, "team-c")
    assert after["cron"].paused and after["cron"].next_run_at == before["cron"].next_run_at
    assert after["fresh"].next_run_at == after["cron"].next_run_at  # same spec, same instant


def test_a_changed_schedule_recomputes_next_run_at(store: Store) -> None:
    with store.tx() as tx:
        jobs_apply(tx, [_job("move")])
    with store.tx() as tx:
        jobs_apply(tx, [_job("move", schedule={"cron": "30 1 * * *", "time_zone": "UTC"})])
    row = _stored(store)["move"]
    assert row.schedule_expr == "30 1 * * *"
    assert (row.next_run_at.hour, row.next_run_at.minute) == (1, 30)


def test_batches_larger_than_a_chunk_and_all_or_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_module, "CHUNK_SIZE", 7)
    jobs = [_job(f"bulk-{i:03d}") for i in range(40)]
    with store.tx() as tx:
        writes = jobs_apply(tx, jobs)
    assert [w.action for w in writes] == ["created"] * 40
    with store.tx() as tx:
        again = jobs_apply(tx, [*jobs, JobTombstone("bulk-000", 9)])
    assert [w.action for w in again] == ["updated"] * 40 + ["deleted"]
    assert len(_stored(store)) == 39

    class Boom(Exception):
        pass

    with pytest.raises(Boom), store.tx() as tx:
        jobs_apply(tx, [_job("rolled-back")])
        raise Boom
    assert "rolled-back" not in _stored(store)


def test_a_bulk_write_refreshes_the_statistics_the_due_scan_is_planned_from(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_module, "_ANALYZE_MIN_ROWS", 50)
    with store.tx() as tx:
        jobs_apply(tx, [_job(f"small-{i}") for i in range(10)])  # below the threshold
        assert tx.jobs_estimated_rows() < 10
    with store.tx() as tx:
        jobs_apply(tx, [_job(f"stats-{i:03d}") for i in range(120)])
    with store.tx() as tx:
        # What the query planner believes now: the rows written, not an empty table.
        assert tx.jobs_estimated_rows() == 130
        # A write that is small against the table (under a tenth) leaves them alone.
        monkeypatch.setattr(jobs_module, "_ANALYZE_MIN_ROWS", 5)
        assert not jobs_module.refresh_statistics(tx, 12)
        assert jobs_module.refresh_statistics(tx, 14)


_VARIED: list[dict[str, Any]] = [
    {},
    {"tenant": "team-b", "window_seconds": 30, "catch_up": "all", "max_catch_up": 7},
    {"schedule": {"interval": "PT90S", "start_at": "2031-01-01T00:00:00Z"}, "paused": True},
    {"overlap": "skip", "retry": {"max_attempts": 5, "initial_interval_seconds": 2, "jitter": 0}},
    {"target": {"kafka": {"topic": "orders", "key": "k", "value": "{}"}}, "lease_seconds": 300},
]


def _columns(store: Store) -> dict[str, tuple[Any, ...]]:
    """Every column a write sets, by job id (not the id, its shard, nor the write instants)."""
    with store.engine.begin() as conn:
        rows = conn.execute(text("SELECT * FROM jobs")).mappings().all()
    assert all(r["shard_id"] == shard_for(r["job_id"]) for r in rows)
    skip = {"job_id", "shard_id", "created_at", "updated_at"}
    return {r["job_id"]: tuple(v for k, v in r.items() if k not in skip) for r in rows}


def test_a_batch_stores_each_job_exactly_as_a_batch_of_one_does(store: Store) -> None:
    # A batch sends the columns all its rows share once (rows.batch_json_shared); a batch of one
    # shares every column. Jobs differing in one or several columns (a NULL start_at beside a
    # value in the same column among them) are stored the same either way, and so are the jobs
    # of a batch whose rows differ only in their ids.
    with store.tx() as tx:
        jobs_apply(tx, [_job(f"batch-{i}", **extra) for i, extra in enumerate(_VARIED)])
        jobs_apply(tx, [_job(f"same-{i}", **_VARIED[1]) for i in range(3)])
    for i, extra in enumerate(_VARIED):
        with store.tx() as tx:
            jobs_apply(tx, [_job(f"alone-{i}", **extra)])
    stored = _columns(store)
    assert len({repr(stored[f"alone-{i}"]) for i in range(len(_VARIED))}) == len(_VARIED)
    for i in range(len(_VARIED)):
        assert stored[f"batch-{i}"] == stored[f"alone-{i}"], _VARIED[i]
    for i in range(3):
        assert stored[f"same-{i}"] == stored["alone-1"]
