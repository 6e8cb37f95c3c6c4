"""The shard fence (migration 0011, sql/shards.sql): one contract run against the planner store's
in-memory twin and PostgreSQL, then what only PostgreSQL can show: a planning transaction's share
lock holds a claim off, and a real planner in etcd mode is refused once a newer owner claimed.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from duetime.bus.topics import TopicCatalog
from duetime.jobdef import parse_jobs
from duetime.sharding import shard_for
from duetime.store import Store
from duetime.store.jobs import jobs_apply
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import Planner
from duetime_planner.ports import PlannerStore
from tests.fakes.planner_store import FakePlannerStore, FakeProducer, due_job

pytestmark = pytest.mark.integration

JOB = "fence-job"
SHARD = shard_for(JOB)
LATER = datetime(2030, 1, 1, tzinfo=UTC)


def _definition(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "schedule": {"interval": "PT1H"},
        "target": {"http": {"url": "https://example.test/"}},
        "target_service": "svc",
    }


@pytest.fixture(params=["fake", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[PlannerStore]:
    if request.param == "fake":
        fake = FakePlannerStore()
        fake.add_job(due_job(JOB, next_run_at=datetime(2026, 1, 1, tzinfo=UTC)))
        yield fake
        return
    database_url: str = request.getfixturevalue("database_url")
    real = Store(database_url, pool_size=2)
    with real.tx() as tx:
        jobs_apply(tx, parse_jobs([_definition(JOB)]))
    try:
        yield real
    finally:
        real.close()


def test_a_claim_raises_the_token_only_from_a_lower_one(store: PlannerStore) -> None:
    with store.tx() as tx:
        assert tx.shards_claim("a", {SHARD: 10}) == {SHARD}
    with store.tx() as tx:
        assert tx.shards_claim("a", {SHARD: 10}) == set()  # already claimed with it
        assert tx.shards_claim("old", {SHARD: 9}) == set()  # never lowered
        assert tx.shards_claim("b", {SHARD: 12}) == {SHARD}


def test_the_fence_holds_the_current_token_and_counts_a_lower_one(store: PlannerStore) -> None:
    with store.tx() as tx:
        tx.shards_claim("b", {SHARD: 12})
    with store.tx() as tx:
        assert tx.shards_fence("b", {SHARD: 12}).held == {SHARD}
    with store.tx() as tx:
        fence = tx.shards_fence("a", {SHARD: 10})
        assert fence.refused == {SHARD} and not fence.held
    with store.tx() as tx:  # not claimed with a higher token yet: neither held nor refused
        fence = tx.shards_fence("c", {SHARD: 15})
        assert not fence.held and not fence.refused


def test_writes_under_a_replaced_token_change_nothing(store: PlannerStore) -> None:
    with store.tx() as tx:
        tx.shards_claim("b", {SHARD: 12})
    with store.tx() as tx:
        assert tx.jobs_advance_many([(JOB, LATER, None)], {SHARD: 10}) == 0
        assert tx.jobs_advance_many([(JOB, LATER, None)], {SHARD: 12}) == 1
        assert tx.jobs_advance_many([(JOB, LATER, None)], None) == 1  # SKIP LOCKED mode


def test_postgres_counts_refusals_on_the_fence_row(database_url: str) -> None:
    real = Store(database_url, pool_size=1)
    try:
        with real.tx() as tx:
            tx.shards_claim("new", {SHARD: 30})
        for _ in range(2):
            with real.tx() as tx:
                tx.shards_fence("old", {SHARD: 20})
        with real.tx() as tx:
            (row,) = [r for r in tx.shard_owners_list() if r.shard_id == SHARD]
        assert (row.token, row.owner, row.rejected, row.last_rejected_owner) == (
            30,
            "new",
            2,
            "old",
        )
    finally:
        real.close()


def test_a_planning_transaction_holds_a_claim_off_until_it_ends(database_url: str) -> None:
    real = Store(database_url, pool_size=3)
    try:
        with real.tx() as tx:
            tx.shards_claim("a", {SHARD: 10})
        with real.tx() as planning:
            assert planning.shards_fence("a", {SHARD: 10}).held == {SHARD}
            # The next owner's claim skips the row the planning transaction holds ...
            with real.tx() as other:
                assert other.shards_claim("b", {SHARD: 11}) == set()
        # ... and gets it as soon as that transaction ended.
        with real.tx() as other:
            assert other.shards_claim("b", {SHARD: 11}) == {SHARD}
    finally:
        real.close()


class _Owner:
    def __init__(self, tokens: dict[int, int]) -> None:
        self.tokens = tokens

    def current(self, now: float) -> dict[int, int]:
        return self.tokens


def _fenced_planner(store: Store, shards: set[int], token: int, member: str) -> Planner:
    """A planner in etcd mode whose lease holds ``shards`` under ``token``, publishing nowhere."""
    config = PlannerConfig(max_lookahead=timedelta(seconds=30))
    owner = _Owner(dict.fromkeys(shards, token))
    planner = Planner(
        store, FakeProducer(), TopicCatalog("fence."), config, ownership=owner, member=member
    )
    planner.ensure_partitions(datetime.now(UTC).date())
    return planner


def _make_due(store: Store, ago: str) -> None:
    # Hot again too: a round near the top of the hour advances the jobs into the cold tier
    # (migration 0015), whose check refuses a next run moved without its bucket.
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE jobs SET next_run_at = now() - CAST(:ago AS interval), cold_bucket = NULL"
            ),
            {"ago": ago},
        )


def test_a_planner_on_postgres_is_refused_once_a_newer_owner_claimed(database_url: str) -> None:
    real = Store(database_url, pool_size=2)
    try:
        with real.tx() as tx:
            jobs_apply(tx, parse_jobs([_definition(f"pg-{i}") for i in range(40)]))
        shards = {shard_for(f"pg-{i}") for i in range(40)}
        _make_due(real, "0 s")  # an interval's first run is an hour out
        old = _fenced_planner(real, shards, 5, "old")
        first = old.run_once(0.0)
        assert first.jobs_planned == 40 and first.shards_refused == 0
        new = _fenced_planner(real, shards, 9, "new")
        new.run_once(0.0)
        _make_due(real, "1 minute")
        late = old.run_once(1.0)
        assert late.jobs_planned == 0 and late.shards_refused == len(shards)
        with real.engine.begin() as conn:
            owners = conn.execute(
                text("SELECT owner, sum(rejected) AS refused FROM shard_owners GROUP BY owner")
            ).all()
        assert [(o.owner, o.refused) for o in owners] == [("new", len(shards))]
        assert new.run_once(2.0).jobs_planned == 40
    finally:
        real.close()
