"""The cold tier on PostgreSQL (migration 0015, sql/cold.sql): far-future jobs stay out of the due
index, the planner's loader makes the coming hour hot ahead of time and the planner then plans it
on time, a loader under a replaced shard token is refused, and the SQL rule is the Python one;
the loader's statements as one contract for the in-memory twin and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from duetime.bus.topics import TopicCatalog
from duetime.cold_tier import bucket_of, cold_bucket_for
from duetime.jobdef import parse_jobs
from duetime.sharding import SHARD_COUNT, shard_for
from duetime.store import Store
from duetime.store.jobs import jobs_apply
from duetime_planner.cold import ColdLoader
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import Planner
from duetime_planner.ports import PlannerStore
from tests.fakes.planner_store import FakePlannerStore, FakeProducer, due_job

pytestmark = pytest.mark.integration

ALL_SHARDS = list(range(SHARD_COUNT))


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    real = Store(database_url, pool_size=2)
    yield real
    real.close()


def _at(job_id: str, instant: datetime) -> dict[str, Any]:
    return {
        "id": job_id,
        "schedule": {"at": instant.isoformat()},
        "target": {"http": {"url": "https://example.test/remind"}},
        "target_service": "svc",
    }


def _apply(store: Store, *definitions: dict[str, Any]) -> None:
    with store.tx() as tx:
        jobs_apply(tx, parse_jobs(list(definitions)))


def _db_now(store: Store) -> datetime:
    with store.tx() as tx:
        return tx.db_now()


def _cold(store: Store) -> dict[str, datetime | None]:
    with store.engine.begin() as conn:
        rows = conn.execute(text("SELECT job_id, cold_bucket FROM jobs")).all()
    return {r.job_id: r.cold_bucket for r in rows}


def _due(store: Store, horizon: datetime) -> list[str]:
    with store.tx() as tx:
        return [j.job_id for j in tx.jobs_get_due_batch(ALL_SHARDS, horizon, 100)]


def _make_cold(store: Store, job_id: str) -> None:
    """Put a hot job into its bucket, as a write long ago would have left it (the check of
    migration 0015 only lets the bucket of its next run be written)."""
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE jobs SET cold_bucket = duetime_hour_bucket(next_run_at) WHERE job_id = :j"
            ),
            {"j": job_id},
        )


def _planner(store: Store, **config: Any) -> Planner:
    planner = Planner(store, FakeProducer(), TopicCatalog("cold."), PlannerConfig(**config))
    planner.ensure_partitions(datetime.now(UTC).date())
    return planner


def test_a_far_future_job_lands_cold_and_out_of_the_hot_index(store: Store) -> None:
    now = _db_now(store)
    reminder = now + timedelta(days=182)
    _apply(
        store,
        _at("reminder", reminder),
        _at("soon", now + timedelta(minutes=5)),
        {**_at("daily", now), "schedule": {"cron": "0 3 * * *", "time_zone": "Asia/Kolkata"}},
    )
    cold = _cold(store)
    assert cold["reminder"] == bucket_of(reminder)
    assert cold["soon"] is None
    # 03:00 in Kolkata is 21:30 UTC: its bucket is the UTC hour 21:00, whatever the zone.
    assert cold["daily"] is None or cold["daily"].minute == 0
    # The due scan, even asked a year ahead, sees the hot rows only.
    assert "reminder" not in _due(store, now + timedelta(days=365))
    assert "soon" in _due(store, now + timedelta(days=365))
    with store.engine.begin() as conn:
        hot = conn.execute(
            text(
                "SELECT job_id FROM jobs WHERE NOT paused AND next_run_at IS NOT NULL"
                " AND cold_bucket IS NULL"  # the due index's predicate
            )
        ).scalars()
        assert "reminder" not in set(hot)


def test_the_sql_rule_is_the_python_rule(store: Store) -> None:
    base = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    cases = [
        (base, base),
        (base + timedelta(minutes=59, seconds=59), base),
        (base + timedelta(hours=1), base + timedelta(hours=1)),
        (base + timedelta(hours=1, microseconds=-1), base + timedelta(minutes=30)),
        (base + timedelta(hours=2, minutes=10), base + timedelta(hours=1, minutes=30)),
        (base + timedelta(days=182, minutes=45), base + timedelta(hours=1)),
        (datetime(1999, 12, 31, 23, 30, tzinfo=UTC), datetime(1999, 12, 31, 22, tzinfo=UTC)),
    ]
    with store.engine.begin() as conn:
        for next_run_at, hot_from in cases:
            sql = conn.execute(
                text("SELECT duetime_cold_bucket(:n, :h) AS b, duetime_hour_bucket(:n) AS h"),
                {"n": next_run_at, "h": hot_from},
            ).one()
            assert sql.b == cold_bucket_for(next_run_at, hot_from, timedelta(0)), next_run_at
            assert sql.h == bucket_of(next_run_at)


def test_a_next_run_moved_without_its_bucket_is_refused(store: Store) -> None:
    now = _db_now(store)
    _apply(store, _at("reminder", now + timedelta(days=182)))
    moved = text("UPDATE jobs SET next_run_at = now() WHERE job_id = 'reminder'")
    with pytest.raises(IntegrityError, match="jobs_cold_bucket_check"), store.engine.begin() as c:
        c.execute(moved)


def test_a_job_advanced_beyond_the_horizon_goes_cold(store: Store) -> None:
    now = _db_now(store)
    _apply(store, {**_at("daily", now), "schedule": {"cron": "0 3 * * *"}})
    later = now + timedelta(days=1, hours=2)
    with store.tx() as tx:
        assert tx.jobs_advance_many([("daily", later, now)]) == 1
    assert _cold(store)["daily"] == bucket_of(later)
    soon = now + timedelta(minutes=10)
    with store.tx() as tx:
        assert tx.jobs_advance_many([("daily", soon, now)]) == 1
    assert _cold(store)["daily"] is None


def test_the_loader_makes_the_coming_hour_hot_ahead_and_the_planner_plans_it_on_time(
    store: Store,
) -> None:
    now = _db_now(store)
    due_at = (now + timedelta(seconds=20)).replace(microsecond=0)
    _apply(
        store,
        _at("reminder", due_at),
        _at("next-hour", now + timedelta(minutes=50)),
        _at("far", now + timedelta(days=182)),
    )
    _make_cold(store, "reminder")
    _make_cold(store, "next-hour")
    assert _due(store, now + timedelta(days=365)) == []  # nothing hot: the scan finds nothing

    stats = _planner(store).run_once(0.0)

    # Both coming buckets were made hot in this round, the reminder planned before it is due,
    # the job due in 50 minutes waits hot in the due index, the far one stays cold.
    assert stats.cold_jobs_loaded == 2 and stats.cold_buckets_loaded >= 1
    assert stats.jobs_planned == 1 and stats.runs_created == 1
    cold = _cold(store)
    assert cold["reminder"] is None and cold["next-hour"] is None
    assert cold["far"] == bucket_of(now + timedelta(days=182))
    with store.engine.begin() as conn:
        run = conn.execute(
            text("SELECT scheduled_for, created_at FROM runs WHERE job_id = 'reminder'")
        ).one()
    assert run.scheduled_for == due_at and run.created_at < due_at
    assert "next-hour" in _due(store, now + timedelta(hours=1))


def test_a_loader_under_a_replaced_shard_token_is_refused(store: Store) -> None:
    now = _db_now(store)
    _apply(store, _at("reminder", now + timedelta(minutes=30)))
    _make_cold(store, "reminder")
    shard = shard_for("reminder")
    bucket = _cold(store)["reminder"]
    assert bucket is not None
    with store.tx() as tx:
        assert tx.shards_claim("old", {shard: 5}) == {shard}
    with store.tx() as tx:
        assert tx.shards_claim("new", {shard: 9}) == {shard}
    with store.tx() as tx:  # the statement alone carries the token
        assert tx.jobs_cold_load(bucket, [shard], {shard: 5}) == 0
    config = PlannerConfig()
    stale = ColdLoader(store, config, "old").load([shard], {shard: 5})
    assert (stale.jobs, stale.shards_refused) == (0, 1)
    assert _cold(store)["reminder"] == bucket
    with store.engine.begin() as conn:
        refused = conn.execute(
            text("SELECT rejected FROM shard_owners WHERE shard_id = :s"), {"s": shard}
        ).scalar_one()
    assert refused == 1
    current = ColdLoader(store, config, "new").load([shard], {shard: 9})
    assert (current.buckets, current.jobs, current.shards_refused) == (1, 1, 0)
    assert _cold(store)["reminder"] is None


# The loader's statements, one contract for the planner store's in-memory twin and PostgreSQL, so
# the unit tests' twin (tests/fakes/planner_store.py) cannot drift from sql/cold.sql.


class _ColdContract:
    def __init__(self, store: PlannerStore, now: datetime, add_cold: Any) -> None:
        self.store = store
        self.now = now
        self.add_cold = add_cold  # job_id, next_run_at -> stores a job written at self.now


@pytest.fixture(params=["fake", "postgres"])
def contract(request: pytest.FixtureRequest) -> Iterator[_ColdContract]:
    if request.param == "fake":
        fake = FakePlannerStore()

        def fake_add(job_id: str, at: datetime) -> None:
            fake.add_job(due_job(job_id, next_run_at=at))

        yield _ColdContract(fake, fake.clock, fake_add)
        return
    real = Store(request.getfixturevalue("database_url"), pool_size=2)

    def real_add(job_id: str, at: datetime) -> None:
        _apply(real, _at(job_id, at))

    try:
        yield _ColdContract(real, _db_now(real), real_add)
    finally:
        real.close()


def test_contract_cold_buckets_load_once_and_only_under_the_current_token(
    contract: _ColdContract,
) -> None:
    far = contract.now + timedelta(days=10)
    contract.add_cold("c-far", far)
    contract.add_cold("c-soon", contract.now + timedelta(minutes=1))
    shard = shard_for("c-far")
    shards = [shard, shard_for("c-soon")]
    with contract.store.tx() as tx:
        due = tx.jobs_get_due_batch(ALL_SHARDS, far + timedelta(days=1), 10)
        assert [j.job_id for j in due] == ["c-soon"]
        # Listed once the instant given is past the start of its bucket, not before.
        assert tx.jobs_cold_buckets(shards, bucket_of(far), 10) == []
        listed = tx.jobs_cold_buckets(shards, bucket_of(far) + timedelta(seconds=1), 10)
        assert listed == [(bucket_of(far), 1)]
        others = [s for s in ALL_SHARDS if s != shard]
        assert tx.jobs_cold_buckets(others, far + timedelta(hours=1), 10) == []
        tx.shards_claim("new", {shard: 9})
    with contract.store.tx() as tx:
        assert tx.jobs_cold_load(bucket_of(far), [shard], {shard: 5}) == 0
        assert tx.jobs_cold_load(bucket_of(far), [shard], {shard: 9}) == 1
        assert tx.jobs_cold_load(bucket_of(far), [shard], None) == 0  # loaded
    with contract.store.tx() as tx:
        due = tx.jobs_get_due_batch(ALL_SHARDS, far + timedelta(days=1), 10)
        assert sorted(j.job_id for j in due) == ["c-far", "c-soon"]
        assert tx.jobs_cold_buckets(ALL_SHARDS, far + timedelta(days=1), 10) == []
