"""The planner's round on its in-memory twins (tests/fakes/planner_store.py): what ``run_once(now)``
plans, publishes and refuses, in SKIP LOCKED mode and in etcd mode with the shard fence."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from duetime.bus.topics import TopicCatalog
from duetime.sharding import shard_for
from duetime.store.rows import DueJob
from duetime_planner.config import PlannerConfig
from duetime_planner.planner import Planner
from tests.fakes.planner_store import FakePlannerStore, FakePlannerTx, FakeProducer, due_job

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
# No refill: a round plans exactly the lookahead (the refill has its own test).
CONFIG = PlannerConfig(
    lookahead=timedelta(seconds=30),
    max_lookahead=timedelta(seconds=30),
    refill=timedelta(0),
    batch_size=50,
)


def _job(job_id: str, *, next_run_at: datetime = NOW, catch_up: str = "once") -> DueJob:
    return due_job(job_id, next_run_at=next_run_at, catch_up=catch_up)


@dataclass
class _Owner:
    """A ShardOwner whose answer the test sets (what etcd granted, or nothing once lapsed)."""

    tokens: dict[int, int] = field(default_factory=dict)
    asked_at: list[float] = field(default_factory=list)

    def current(self, now: float) -> Mapping[int, int]:
        self.asked_at.append(now)
        return self.tokens


def _planner(
    store: FakePlannerStore,
    owner: _Owner | None = None,
    member: str = "p1",
    config: PlannerConfig = CONFIG,
) -> tuple[Planner, FakeProducer]:
    producer = FakeProducer()
    planner = Planner(
        store,
        producer,
        TopicCatalog("t."),
        config,
        monotonic=lambda: 0.0,
        ownership=owner,
        member=member,
    )
    planner.ensure_partitions(NOW.date())
    return planner, producer


def test_skip_locked_round_plans_publishes_and_advances_every_due_job() -> None:
    store = FakePlannerStore(NOW)
    for i in range(3):
        store.add_job(_job(f"job-{i}"))
    planner, producer = _planner(store)
    stats = planner.run_once(100.0)
    # 30 s lookahead, every 10 s from NOW: NOW, +10, +20, +30 for each job.
    assert stats.jobs_planned == 3
    assert stats.runs_created == 12
    assert stats.runs_published == 12
    assert len(producer.records) == 12
    assert all(r.published for job in range(3) for r in store.runs_of(f"job-{job}"))
    assert store.job("job-0").next_run_at == NOW + timedelta(seconds=40)
    # Nothing is due again until the clock moves: a second round creates nothing.
    assert planner.run_once(101.0).runs_created == 0


class _WatchedStore(FakePlannerStore):
    """Counts the transactions begun on the main thread (the planning loop's)."""

    def __init__(self, now: datetime) -> None:
        super().__init__(now)
        self.main_txs = 0

    @contextmanager
    def tx(self) -> Iterator[FakePlannerTx]:
        if threading.current_thread() is threading.main_thread():
            self.main_txs += 1
        with super().tx() as tx:
            yield tx


class _SlowBroker(FakeProducer):
    """Its flush off the main thread (a batch's wait for the broker's answers) returns once the
    planning loop has begun a transaction after the batch's last record, or after a second;
    the log says which came first."""

    def __init__(self, store: _WatchedStore, log: list[str]) -> None:
        super().__init__()
        self.store, self.log = store, log
        self.after = 0

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        self.log.append("produce")
        self.after = self.store.main_txs
        super().produce(topic, *args, **kwargs)

    def flush(self, timeout: float) -> int:
        if threading.current_thread() is threading.main_thread():
            self.log.append("flush on the loop")  # the outbox's, in its own transaction
        else:
            deadline = time.monotonic() + 1.0
            while self.store.main_txs == self.after and time.monotonic() < deadline:
                time.sleep(0.001)
            overlapped = self.store.main_txs > self.after
            self.log.append("answered meanwhile" if overlapped else "answered alone")
        return super().flush(timeout)


def test_a_batch_waits_for_the_broker_while_the_next_one_plans() -> None:
    """The wait for one batch's acknowledgements overlaps the next batch's database work; the
    next batch produces only once the one before is settled (its flush must not wait for the
    new records), and the round returns with every publication settled."""
    log: list[str] = []
    store = _WatchedStore(NOW)
    for i in range(120):  # three batches of at most 50 jobs
        store.add_job(_job(f"job-{i:03}"))
    producer = _SlowBroker(store, log)
    planner = Planner(store, producer, TopicCatalog("t."), CONFIG, monotonic=lambda: 0.0)
    planner.ensure_partitions(NOW.date())
    stats = planner.run_once(100.0)
    assert (stats.runs_created, stats.runs_published) == (480, 480)
    assert all(r.published for job in range(120) for r in store.runs_of(f"job-{job:03}"))
    assert store.state.publications == {}
    grouped = [(line, len(list(lines))) for line, lines in itertools.groupby(log)]
    assert grouped == [
        ("produce", 200),
        ("answered meanwhile", 1),  # the wait overlapped the next batch's transaction ...
        ("produce", 200),  # ... which produced only after it
        ("answered meanwhile", 1),
        ("produce", 80),
        ("answered alone", 1),  # the last batch: settled before the outbox's read
        ("flush on the loop", 1),
    ]
    planner.close()


def test_a_round_settles_its_publication_and_unmarks_what_the_broker_refused() -> None:
    store = FakePlannerStore(NOW)
    store.add_job(_job("job-0"))
    planner, producer = _planner(store)
    producer.fail = True
    stats = planner.run_once(100.0)
    assert (stats.runs_created, stats.runs_published) == (4, 0)
    # Inserted marked, provisionally: the settle unmarked all four, and the row is gone.
    assert not any(r.published for r in store.runs_of("job-0"))
    assert store.state.publications == {}
    producer.fail = False
    assert planner.run_once(101.0).runs_published == 4  # the outbox, once the broker is back
    assert all(r.published for r in store.runs_of("job-0"))


def test_a_round_whose_producing_raises_unmarks_every_run_it_inserted_marked() -> None:
    store = FakePlannerStore(NOW)
    store.add_job(_job("job-0"))
    planner, producer = _planner(store)
    calls = 0

    def produce_twice(*args: object, **kwargs: object) -> None:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise RuntimeError("the client refused the record")
        FakeProducer.produce(producer, *args, **kwargs)  # type: ignore[arg-type]

    producer.produce = produce_twice  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="refused the record"):
        planner.run_once(100.0)
    # Two produced, two never were, none acknowledged: all four back to the outbox.
    assert len(store.runs_of("job-0")) == 4
    assert not any(r.published for r in store.runs_of("job-0"))
    assert store.state.publications == {}


def test_a_round_of_frequent_jobs_is_planned_in_time_slices_earliest_first() -> None:
    store = FakePlannerStore(NOW)
    for i in range(20):  # every 10 s, 30 s ahead: 4 runs each, 80 in all
        store.add_job(_job(f"often-{i}"))
    planner, producer = _planner(store, config=replace(CONFIG, batch_runs=25))
    stats = planner.run_once(0.0)
    # The whole lookahead is planned and published in one round, in batches of about 25 runs.
    assert stats.runs_created == stats.runs_published == 80
    assert all(
        store.job(f"often-{i}").next_run_at == NOW + timedelta(seconds=40) for i in range(20)
    )
    assert len(producer.records) == 80
    # Earliest first, in time slices, for the runs due within the lookahead's first half (15 s):
    # every one of them was written before any run due later, and no batch wrote more than 25
    # (plus one first run a job). Beyond, whole jobs: each job's remaining runs in one batch.
    written = [(job_id, scheduled_for) for job_id, scheduled_for in store.state.runs]
    urgent = [s for _j, s in written if s < NOW + timedelta(seconds=15)]
    assert [s for _j, s in written[: len(urgent)]] == sorted(urgent)
    assert urgent[:20] == [NOW] * 20
    later = [j for j, s in written[len(urgent) :]]
    assert later and all(s >= NOW + timedelta(seconds=15) for _j, s in written[len(urgent) :])
    assert later == sorted(later, key=later.index)  # contiguous per job
    assert len(set(later)) == 20
    assert store.transactions >= 80 // 25
    assert planner.run_once(1.0).runs_created == 0


def test_a_due_job_is_planned_refill_beyond_the_lookahead_and_left_alone_until_due_again() -> None:
    store = FakePlannerStore(NOW)
    store.add_job(_job("often"))  # every 10 s
    planner, producer = _planner(store, config=replace(CONFIG, refill=timedelta(seconds=15)))
    # Lookahead 30 s plus refill 15 s: NOW .. NOW+40, every run published at once.
    assert planner.run_once(0.0).runs_published == 5
    assert store.job("often").next_run_at == NOW + timedelta(seconds=50)
    # 10 s later the job's next run (+50) is not yet within the lookahead (+40): not visited.
    store.clock = NOW + timedelta(seconds=10)
    assert planner.run_once(10.0).jobs_planned == 0
    # 20 s later it is (+50 <= +50): planned up to +65, the next visit 20 s on.
    store.clock = NOW + timedelta(seconds=20)
    stats = planner.run_once(20.0)
    assert (stats.jobs_planned, stats.runs_created) == (1, 2)
    assert store.job("often").next_run_at == NOW + timedelta(seconds=70)
    assert len(producer.records) == 7


def test_catch_up_policy_decides_the_missed_occurrences() -> None:
    store = FakePlannerStore(NOW)
    missed_since = NOW - timedelta(minutes=5)  # 30 occurrences missed (an outage)
    for policy in ("all", "once", "skip"):
        store.add_job(_job(f"cu-{policy}", next_run_at=missed_since, catch_up=policy))
    planner, _ = _planner(store)
    planner.run_once(0.0)
    # Occurrences older than on_time_grace (60 s) are missed; the 6 within it are on time.
    missed_before = NOW - CONFIG.on_time_grace
    missed = {
        policy: sum(r.run.scheduled_for < missed_before for r in store.runs_of(f"cu-{policy}"))
        for policy in ("all", "once", "skip")
    }
    assert missed == {"all": 24, "once": 1, "skip": 0}
    on_time = {
        policy: sum(
            missed_before <= r.run.scheduled_for < NOW for r in store.runs_of(f"cu-{policy}")
        )
        for policy in ("all", "once", "skip")
    }
    assert on_time == {"all": 6, "once": 6, "skip": 6}


def test_etcd_mode_plans_only_owned_shards_after_claiming_them_in_the_fence() -> None:
    store = FakePlannerStore(NOW)
    mine, theirs = _job("mine-1"), _job("theirs-2")
    assert mine.shard_id != theirs.shard_id
    store.add_job(mine)
    store.add_job(theirs)
    owner = _Owner({mine.shard_id: 41})
    planner, _ = _planner(store, owner)
    stats = planner.run_once(7.5)
    assert owner.asked_at == [7.5]  # the injected instant decides whether the lease holds
    assert store.fence_row(mine.shard_id) is not None
    assert store.fence_row(mine.shard_id).token == 41  # type: ignore[union-attr]
    assert store.runs_of("mine-1") and not store.runs_of("theirs-2")
    assert stats.jobs_planned == 1 and stats.shards_refused == 0


def test_a_planner_whose_lease_lapsed_plans_nothing() -> None:
    store = FakePlannerStore(NOW)
    store.add_job(_job("mine-1"))
    planner, producer = _planner(store, _Owner({}))
    stats = planner.run_once(0.0)
    assert stats.jobs_planned == 0 and not store.runs_of("mine-1")
    assert not producer.records
    assert store.fence_row(shard_for("mine-1")) is None


def test_a_stale_owner_is_refused_by_the_fence_and_the_refusal_is_counted() -> None:
    store = FakePlannerStore(NOW)
    job = _job("contested")
    store.add_job(job)
    stale, _ = _planner(store, _Owner({job.shard_id: 10}), member="old")
    stale.run_once(0.0)
    planned = len(store.runs_of("contested"))
    # A newer owner claims the shard (etcd gave it a larger token) and plans it on.
    store.clock = NOW + timedelta(seconds=20)
    new, _ = _planner(store, _Owner({job.shard_id: 25}), member="new")
    new.run_once(0.0)
    after_new = len(store.runs_of("contested"))
    assert after_new > planned
    # The old owner still believes its token (paused between its lease check and its write).
    store.clock = NOW + timedelta(seconds=40)
    stats = stale.run_once(1.0)
    assert stats.shards_refused == 1 and stats.jobs_planned == 0
    assert len(store.runs_of("contested")) == after_new
    row = store.fence_row(job.shard_id)
    assert row is not None and row.token == 25 and row.owner == "new" and row.rejected == 1


def test_writes_carry_the_token_so_a_raised_fence_refuses_them_inside_the_transaction() -> None:
    store = FakePlannerStore(NOW)
    job = _job("raced")
    store.add_job(job)
    with store.tx() as tx:
        assert tx.shards_claim("a", {job.shard_id: 5}) == {job.shard_id}
    with store.tx() as tx:
        assert tx.shards_claim("b", {job.shard_id: 9}) == {job.shard_id}
        assert tx.shards_claim("a", {job.shard_id: 5}) == set()  # never lowered
    with store.tx() as tx:
        assert (
            tx.jobs_advance_many([("raced", NOW + timedelta(hours=1), None)], {job.shard_id: 5})
            == 0
        )
        assert (
            tx.jobs_advance_many([("raced", NOW + timedelta(hours=1), None)], {job.shard_id: 9})
            == 1
        )


def test_a_fence_row_removed_by_an_operator_is_claimed_again() -> None:
    store = FakePlannerStore(NOW)
    job = _job("reclaimed")
    store.add_job(job)
    planner, _ = _planner(store, _Owner({job.shard_id: 7}))
    planner.run_once(0.0)
    del store.state.fence[job.shard_id]  # DELETE FROM shard_owners (docs/failover.md)
    store.clock = NOW + timedelta(minutes=1)
    planner.run_once(1.0)  # the fence finds no row with its token: nothing is written ...
    assert store.fence_row(job.shard_id) is None
    before = len(store.runs_of("reclaimed"))
    planner.run_once(2.0)  # ... and the next round claims the shard again and plans it
    row = store.fence_row(job.shard_id)
    assert row is not None and row.token == 7
    assert len(store.runs_of("reclaimed")) > before


def test_a_long_round_stops_at_the_next_batch_once_the_lease_lapsed() -> None:
    store = FakePlannerStore(NOW)
    for i in range(120):  # three batches of 50
        store.add_job(_job(f"long-{i}"))
    planner, _ = _planner(store)
    planner.ownership = _Lapsing({s: 3 for s in range(128)}, answers=2)
    stats = planner.run_once(0.0)
    # The round's start and the check after batch 1 saw the lease; the check after batch 2 did
    # not: two batches planned, the third left to whoever owns the shards next.
    assert stats.jobs_planned == 100


@dataclass
class _Lapsing:
    """A ShardOwner whose lease lapses after ``answers`` answers."""

    tokens: dict[int, int]
    answers: int

    def current(self, now: float) -> Mapping[int, int]:
        self.answers -= 1
        return self.tokens if self.answers >= 0 else {}


class _CountedStore(FakePlannerStore):
    """Counts the planner's transactions (here: its counts of the jobs due ahead); each takes
    ``cost`` seconds of the test's monotonic clock."""

    def __init__(self, now: datetime, clock: list[float], cost: float) -> None:
        super().__init__(now)
        self.ticks, self.cost, self.probes = clock, cost, 0

    @contextmanager
    def tx(self) -> Iterator[FakePlannerTx]:
        self.probes += 1
        self.ticks[0] += self.cost
        with super().tx() as tx:
            yield tx


def _probing(cost: float) -> tuple[Planner, _CountedStore]:
    clock = [0.0]
    store = _CountedStore(NOW, clock, cost)
    config = replace(CONFIG, max_lookahead=timedelta(minutes=10))
    planner = Planner(store, FakeProducer(), TopicCatalog("t."), config, monotonic=lambda: clock[0])
    return planner, store


def test_a_cheap_count_of_the_jobs_due_ahead_is_repeated_every_second() -> None:
    planner, store = _probing(cost=0.0)
    for at, probes in ((0.0, 1), (0.5, 1), (0.99, 1), (1.0, 2), (1.5, 2), (2.0, 3)):
        planner.refresh_lookahead(now=at)
        assert store.probes == probes, at


def test_an_expensive_count_waits_twenty_times_its_duration_and_at_most_probe_interval() -> None:
    planner, store = _probing(cost=0.1)  # 100 ms a count: the next one 2 s later
    for at, probes in ((0.0, 1), (1.5, 1), (1.99, 1), (2.0, 2), (3.9, 2), (4.0, 3)):
        planner.refresh_lookahead(now=at)
        assert store.probes == probes, at
    planner, store = _probing(cost=1.0)  # 20 s by the rule, capped at probe_interval (5 s)
    for at, probes in ((0.0, 1), (4.9, 1), (5.0, 2)):
        planner.refresh_lookahead(now=at)
        assert store.probes == probes, at
