"""In-memory twins of the planner's ports: ``FakePlannerStore`` (PlannerStore / PlannerTx, with
the fence rules of sql/shards.sql) and ``FakeProducer`` (the outbox's producer).

A transaction works on a copy of the state and commits it only if its block ends without an
exception, as PostgreSQL would. The database clock is ``clock``, moved by the test.
tests/integration/test_shard_fence.py runs the same fence contract against it and PostgreSQL.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from duetime.cold_tier import DEFAULT_HOT_HORIZON, cold_bucket_for
from duetime.flow import TargetLimit
from duetime.model import HttpTarget
from duetime.schedule import RetryPolicy, ScheduleSpec
from duetime.sharding import shard_for
from duetime.store import InsertedRuns, NewRun, OccurrenceGap, ShardFence
from duetime.store.rows import DueJob, DueJobReader, JobShape, OutboxRun

__all__ = ["FakePlannerStore", "FakeProducer", "FakeRun", "FenceRow"]


EVERY_10S = ScheduleSpec(kind="interval", expression="PT10S", time_zone="UTC")


def due_job(
    job_id: str,
    *,
    next_run_at: datetime,
    catch_up: str = "once",
    schedule: ScheduleSpec = EVERY_10S,
) -> DueJob:
    """A job as the due scan returns it: every 10 s (or ``schedule``) to an HTTP target, tenant
    ``t``, target service ``svc`` (what tests/integration/test_planner_store_contract.py stores
    too)."""
    shape = JobShape(
        tenant="t",
        schedule=schedule,
        window=timedelta(0),
        catch_up=catch_up,
        max_catch_up=100,
        target_service="svc",
        max_attempts=3,
        target=HttpTarget(url="https://example.test/hook"),
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
        retry=RetryPolicy(),
    )
    return DueJob(job_id, shape, next_run_at, None, shard_for(job_id))


@dataclass
class FenceRow:
    token: int
    owner: str
    rejected: int = 0


@dataclass
class FakeRun:
    run: NewRun
    state: str = "scheduled"
    published: bool = False
    publish_count: int = 0


@dataclass
class _State:
    jobs: dict[str, DueJob] = field(default_factory=dict)
    paused: set[str] = field(default_factory=set)
    runs: dict[tuple[str, datetime], FakeRun] = field(default_factory=dict)
    fence: dict[int, FenceRow] = field(default_factory=dict)
    partitions: set[date] = field(default_factory=set)
    gaps: dict[tuple[str, datetime], OccurrenceGap] = field(default_factory=dict)
    cold: dict[str, datetime] = field(default_factory=dict)  # job_id -> its cold bucket
    # publication id -> (created at, the keys of its runs): run_publications
    publications: dict[int, tuple[datetime, list[tuple[uuid.UUID, datetime]]]] = field(
        default_factory=dict
    )
    next_publication: int = 1


class FakePlannerStore:
    def __init__(
        self,
        clock: datetime = datetime(2026, 12, 3, 12, tzinfo=UTC),
        hot_horizon: timedelta = DEFAULT_HOT_HORIZON,
    ) -> None:
        self.clock = clock
        self.hot_horizon = hot_horizon
        self.state = _State()
        self.transactions = 0
        # One transaction at a time: a transaction works on a copy of the state and replaces
        # it at the end, so two at once (the planner settles a batch's publication on its own
        # thread while the next batch plans) would lose one's writes.
        self._serial = threading.RLock()

    def add_job(self, job: DueJob) -> None:
        """Store ``job`` as a job write would: cold when its next run is beyond the horizon."""
        self.state.jobs[job.job_id] = job
        self.state.cold.pop(job.job_id, None)
        bucket = cold_bucket_for(job.next_run_at, self.clock, self.hot_horizon)
        if bucket is not None:
            self.state.cold[job.job_id] = bucket

    def job(self, job_id: str) -> DueJob:
        return self.state.jobs[job_id]

    def runs_of(self, job_id: str) -> list[FakeRun]:
        found = [r for (j, _sf), r in self.state.runs.items() if j == job_id]
        return sorted(found, key=lambda r: r.run.scheduled_for)

    @contextmanager
    def tx(self) -> Iterator[FakePlannerTx]:
        with self._serial:
            work = copy.deepcopy(self.state)
            yield FakePlannerTx(self, work)
            self.state = work
            self.transactions += 1

    # the fence, outside a planning transaction (the contract test's setup)
    def fence_row(self, shard: int) -> FenceRow | None:
        return self.state.fence.get(shard)


def _fenced(state: _State, shard: int, tokens: Mapping[int, int] | None) -> bool:
    if tokens is None:
        return True
    row = state.fence.get(shard)
    return row is not None and shard in tokens and row.token == tokens[shard]


class FakePlannerTx:
    def __init__(self, store: FakePlannerStore, state: _State) -> None:
        self._store = store
        self._s = state

    def db_now(self) -> datetime:
        return self._store.clock

    def planner_tx_guard(self, idle_timeout: timedelta) -> datetime:
        return self._store.clock

    def shards_claim(self, owner: str, tokens: Mapping[int, int]) -> set[int]:
        claimed = set()
        for shard, token in tokens.items():
            row = self._s.fence.get(shard)
            if row is None or row.token < token:
                rejected = row.rejected if row else 0
                self._s.fence[shard] = FenceRow(token, owner, rejected)
                claimed.add(shard)
        return claimed

    def shards_fence(self, owner: str, tokens: Mapping[int, int]) -> ShardFence:
        held, refused = set(), set()
        for shard, token in tokens.items():
            row = self._s.fence.get(shard)
            if row is None:
                continue
            if row.token == token:
                held.add(shard)
            elif row.token > token:
                row.rejected += 1
                refused.add(shard)
        return ShardFence(frozenset(held), frozenset(refused))

    def jobs_get_due_batch(
        self,
        shards: Sequence[int],
        horizon: datetime,
        limit: int,
        reader: DueJobReader | None = None,
    ) -> list[DueJob]:
        wanted = set(shards)
        due = [
            j
            for j in self._s.jobs.values()
            if j.shard_id in wanted
            and j.job_id not in self._s.paused
            and j.job_id not in self._s.cold
            and j.next_run_at is not None
            and j.next_run_at <= horizon
        ]
        return sorted(due, key=lambda j: (j.next_run_at, j.job_id))[:limit]

    def jobs_due_histogram(
        self, shards: Sequence[int], horizon: datetime, bucket: timedelta, cap: int
    ) -> list[tuple[datetime, int]]:
        counts: dict[datetime, int] = {}
        epoch = datetime(2000, 1, 1, tzinfo=UTC)
        for job in self.jobs_get_due_batch(shards, horizon, cap):
            end = epoch + ((job.next_run_at - epoch) // bucket + 1) * bucket
            counts[end] = counts.get(end, 0) + 1
        return sorted(counts.items())

    def runs_insert_many(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None = None
    ) -> set[uuid.UUID]:
        return self._insert(runs, tokens, None).inserted

    def runs_insert_publishing(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None, planner: str
    ) -> InsertedRuns:
        return self._insert(runs, tokens, planner)

    def _insert(
        self, runs: Sequence[NewRun], tokens: Mapping[int, int] | None, planner: str | None
    ) -> InsertedRuns:
        inserted = set()
        marked: list[tuple[uuid.UUID, datetime]] = []
        for run in runs:
            key = (run.job_id, run.scheduled_for)
            if key in self._s.runs or not _fenced(self._s, run.shard_id, tokens):
                continue
            published = run.published and planner is not None
            self._s.runs[key] = FakeRun(run, published=published, publish_count=int(published))
            inserted.add(run.run_id)
            if published:
                marked.append((run.run_id, run.scheduled_for))
        if not marked:
            return InsertedRuns(inserted, None)
        publication = self._s.next_publication
        self._s.next_publication += 1
        self._s.publications[publication] = (self._store.clock, marked)
        return InsertedRuns(inserted, publication)

    def publication_settle(
        self, publication_id: int, unconfirmed: Sequence[tuple[uuid.UUID, datetime]]
    ) -> int:
        self._s.publications.pop(publication_id, None)
        return self._unmark(unconfirmed)

    def publications_recover(self, after: timedelta, limit: int = 100) -> int:
        stale = sorted(
            p for p, (at, _keys) in self._s.publications.items() if at < self._store.clock - after
        )[:limit]
        return sum(self._unmark(self._s.publications.pop(p)[1]) for p in stale)

    def _unmark(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int:
        rows = [r for r in self._by_id(keys) if r.state == "scheduled" and r.published]
        for row in rows:
            row.published = False
        return len(rows)

    def jobs_advance_many(
        self,
        advances: Sequence[tuple[str, datetime | None, datetime | None]],
        tokens: Mapping[int, int] | None = None,
    ) -> int:
        moved = 0
        for job_id, next_run_at, last in advances:
            job = self._s.jobs.get(job_id)
            if job is None or not _fenced(self._s, job.shard_id, tokens):
                continue
            self._s.jobs[job_id] = replace(
                job,
                next_run_at=next_run_at,  # type: ignore[arg-type]  # None: finished
                last_scheduled_for=last or job.last_scheduled_for,
            )
            self._s.cold.pop(job_id, None)
            bucket = cold_bucket_for(next_run_at, self._store.clock, self._store.hot_horizon)
            if bucket is not None:
                self._s.cold[job_id] = bucket
            moved += 1
        return moved

    def jobs_cold_buckets(
        self, shards: Sequence[int], before: datetime, limit: int
    ) -> list[tuple[datetime, int]]:
        counts: dict[datetime, int] = {}
        for job_id, bucket in self._s.cold.items():
            if bucket < before and self._s.jobs[job_id].shard_id in shards:
                counts[bucket] = counts.get(bucket, 0) + 1
        return sorted(counts.items())[:limit]

    def jobs_cold_load(
        self, bucket: datetime, shards: Sequence[int], tokens: Mapping[int, int] | None = None
    ) -> int:
        loaded = [
            job_id
            for job_id, b in self._s.cold.items()
            if b == bucket
            and (shard := self._s.jobs[job_id].shard_id) in shards
            and _fenced(self._s, shard, tokens)
        ]
        for job_id in loaded:
            del self._s.cold[job_id]
        return len(loaded)

    def occurrence_gaps_insert(
        self, gaps: Sequence[OccurrenceGap], tokens: Mapping[int, int] | None = None
    ) -> None:
        for gap in gaps:
            key = (gap.job_id, gap.first_at)
            if key not in self._s.gaps and _fenced(self._s, gap.shard_id, tokens):
                self._s.gaps[key] = gap

    def runs_ensure_partition(self, day: date) -> None:
        self._s.partitions.add(day)

    def runs_get_unpublished(self, horizon: datetime, limit: int) -> list[OutboxRun]:
        rows = sorted(
            (
                r
                for r in self._s.runs.values()
                if r.state == "scheduled" and not r.published and r.run.due_at <= horizon
            ),
            key=lambda r: r.run.due_at,
        )[:limit]
        out = []
        for row in rows:
            job = self._s.jobs.get(row.run.job_id)
            out.append(
                OutboxRun(
                    run_id=row.run.run_id,
                    job_id=row.run.job_id,
                    tenant=row.run.tenant,
                    target_service=row.run.target_service,
                    scheduled_for=row.run.scheduled_for,
                    due_at=row.run.due_at,
                    attempt=0,
                    max_attempts=row.run.max_attempts,
                    target=job.target if job else None,
                    lease=job.lease if job else timedelta(seconds=60),
                    heartbeat_interval=job.heartbeat_interval if job else timedelta(seconds=20),
                    retry=job.retry if job else RetryPolicy(),
                )
            )
        return out

    def _by_id(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> list[FakeRun]:
        wanted = set(keys)
        return [r for r in self._s.runs.values() if (r.run.run_id, r.run.scheduled_for) in wanted]

    def runs_mark_published_many(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int:
        marked = 0
        for row in self._by_id(keys):
            if row.state == "scheduled" and not row.published:
                row.published = True
                row.publish_count += 1
                marked += 1
        return marked

    def runs_cancel_orphans(self, keys: Sequence[tuple[uuid.UUID, datetime]]) -> int:
        rows = [r for r in self._by_id(keys) if r.state == "scheduled"]
        for row in rows:
            row.state = "cancelled"
        return len(rows)

    def runs_sweep_lost(
        self,
        *,
        grace: timedelta,
        max_grace: timedelta,
        margin: timedelta,
        limit: int,
        scan_limit: int,
    ) -> list[tuple[uuid.UUID, str]]:
        return []  # the sweeper's rule is tested on PostgreSQL (tests/integration)

    def targets_limits(self) -> dict[str, TargetLimit]:
        return {}

    def target_forecast_read(
        self, names: Sequence[str], first: int, last: int
    ) -> dict[tuple[str, int], int]:
        return {}

    def target_forecast_add(self, added: Mapping[tuple[str, int], int]) -> None:
        return None

    def target_forecast_prune(self, before: int) -> None:
        return None


@dataclass
class FakeProducer:
    """confluent-kafka's produce / poll / flush: records are acknowledged on flush, or all fail
    while ``fail`` is set."""

    fail: bool = False
    records: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)
    _pending: list[tuple[Callable[[Any, Any], None] | None, Any]] = field(default_factory=list)

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: Any = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> None:
        self._pending.append((on_delivery, (topic, value, key)))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        pending, self._pending = self._pending, []
        for report, record in pending:
            if not self.fail:
                self.records.append(record)
            if report is not None:
                report("broker away (fake)" if self.fail else None, record)
        return 0
