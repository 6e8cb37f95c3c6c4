"""The reaper on the heartbeat stream, on the real stack: expiry driven by ``runs.heartbeats``.

Workers are played by the test: it claims attempts in PostgreSQL, renews their leases and
announces each lease on ``runs.heartbeats`` as a worker does. Only the reaper's stream runs (no
safety-net scan at all), so every expiry here was found through the stream and judged by the
database.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from duetime.bus.kafka import create_topics, producer_config
from duetime.bus.records import RUN_HEARTBEATS, RUN_RESULTS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.events import RunHeartbeat, RunResult
from duetime.jobdef import parse_job
from duetime.model import run_id_for
from duetime.sharding import partition_for
from duetime.store import Claim, LeaseRenewal, NewRun, Store
from duetime.store.jobs import jobs_apply
from duetime_reaper.config import ReaperConfig
from duetime_reaper.stream import LeaseStream, make_lease_stream
from tests.fixtures.polling import wait_for

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=2)
CONFIG = ReaperConfig(expiry_grace=timedelta(milliseconds=100))


class Stage:
    """One database and topic prefix; plays the workers; starts reapers."""

    def __init__(self, database_url: str, kafka_bootstrap: str) -> None:
        self.settings = Settings(
            database_url=database_url,
            kafka_bootstrap=kafka_bootstrap,
            topic_prefix=f"rs{uuid.uuid4().hex[:8]}.",
        )
        create_topics(self.settings)
        self.catalog = TopicCatalog(self.settings.topic_prefix)
        self.store = Store(database_url, pool_size=4)
        self.producer = Producer(producer_config(self.settings, **{"linger.ms": 0}))
        self.reapers: list[LeaseStream] = []
        self.scheduled_for = datetime.now(UTC).replace(microsecond=0)
        with self.store.tx() as tx:
            jobs_apply(
                tx,
                [
                    parse_job(
                        {
                            "id": "leased",
                            "schedule": {"interval": "PT1H"},
                            "target": {"http": {"url": "https://example.com"}},
                            "retry": {"max_attempts": 3, "initial_interval_seconds": 30},
                        }
                    )
                ],
            )
            tx.runs_ensure_partition(self.scheduled_for.date())

    def close(self) -> None:
        for reaper in self.reapers:
            reaper.stop()
        self.producer.flush(5)
        self.store.close()

    def reaper(self) -> LeaseStream:
        stream = make_lease_stream(self.settings, self.store, CONFIG)
        self.reapers.append(stream)
        stream.start()
        return stream

    def new_run(self, n: int) -> uuid.UUID:
        """Run number ``n`` of the job (its own occurrence, so its own run id)."""
        scheduled_for = self.scheduled_for + timedelta(hours=n)
        run_id = run_id_for("leased", scheduled_for)
        with self.store.tx() as tx:
            tx.runs_ensure_partition(scheduled_for.date())
            tx.runs_insert(
                [
                    NewRun(
                        run_id, "leased", "default", "example.com", scheduled_for, scheduled_for, 3
                    )
                ]
            )
        return run_id

    def scheduled_for_of(self, run_id: uuid.UUID) -> datetime:
        return self.row(run_id).scheduled_for

    def claim(self, run_id: uuid.UUID, worker: str = "w1", lease: timedelta = LEASE) -> Claim:
        """Claim attempt 1 and announce its lease, as a worker does."""
        scheduled_for = self.scheduled_for_of(run_id)
        claim = self.store.runs_claim(run_id, scheduled_for, 1, worker, lease)
        assert claim is not None
        self.announce(run_id, scheduled_for, claim, claim.lease_expires_at, worker)
        return claim

    def renew(self, run_id: uuid.UUID, claim: Claim, worker: str = "w1") -> datetime | None:
        """One heartbeat round: renew in PostgreSQL, then announce the new expiry."""
        scheduled_for = self.scheduled_for_of(run_id)
        renewed = self.store.runs_renew_batch(
            [LeaseRenewal(run_id, scheduled_for, claim.lease_token, LEASE)]
        )
        expires_at = renewed.get(claim.lease_token)
        if expires_at is not None:
            self.announce(run_id, scheduled_for, claim, expires_at, worker)
        return expires_at

    def announce(
        self,
        run_id: uuid.UUID,
        scheduled_for: datetime,
        claim: Claim,
        expires_at: datetime,
        worker: str,
    ) -> None:
        beat = RunHeartbeat(
            run_id=run_id,
            scheduled_for=scheduled_for,
            attempt=claim.attempt,
            worker=worker,
            lease_expires_at=expires_at,
            sent_at=datetime.now(UTC),
        )
        self.producer.produce(
            self.catalog.heartbeats,
            RUN_HEARTBEATS.encode(beat),
            str(run_id).encode(),
            headers=RUN_HEARTBEATS.headers(),
        )
        self.producer.flush(5)

    def complete(self, run_id: uuid.UUID, claim: Claim, worker: str = "w1") -> bool:
        scheduled_for = self.scheduled_for_of(run_id)
        accepted = self.store.runs_complete(
            run_id=run_id,
            scheduled_for=scheduled_for,
            attempt=claim.attempt,
            worker=worker,
            lease_token=claim.lease_token,
            state="succeeded",
            outcome="succeeded",
        )
        if accepted:
            result = RunResult(
                run_id=run_id,
                job_id="leased",
                tenant="default",
                target_service="example.com",
                scheduled_for=scheduled_for,
                attempt=claim.attempt,
                worker=worker,
                outcome="succeeded",
                state="succeeded",
                started_at=claim.claimed_at,
                finished_at=datetime.now(UTC),
            )
            self.producer.produce(
                self.catalog.results,
                RUN_RESULTS.encode(result),
                str(run_id).encode(),
                headers=RUN_RESULTS.headers(),
            )
            self.producer.flush(5)
        return accepted

    def row(self, run_id: uuid.UUID) -> Any:
        with self.store.engine.begin() as conn:
            return conn.execute(text("SELECT * FROM runs WHERE run_id = :r"), {"r": run_id}).one()

    def attempts(self, run_id: uuid.UUID) -> list[Any]:
        with self.store.engine.begin() as conn:
            return list(
                conn.execute(
                    text("SELECT * FROM run_attempts WHERE run_id = :r ORDER BY attempt"),
                    {"r": run_id},
                ).all()
            )

    def expired(self, run_id: uuid.UUID) -> bool:
        return any(a.outcome == "lease_expired" for a in self.attempts(run_id))


@pytest.fixture
def stage(database_url: str, stack: Any) -> Iterator[Stage]:
    s = Stage(database_url, stack.kafka_bootstrap)
    try:
        yield s
    finally:
        s.close()


def test_a_lease_whose_heartbeats_stop_is_expired_from_the_stream(stage: Stage) -> None:
    reaper = stage.reaper()
    assert reaper.assigned.wait(20)
    run_id = stage.new_run(1)
    claim = stage.claim(run_id)
    last_expiry: datetime | None = None
    for _ in range(3):  # a worker renewing for a while, then gone
        time.sleep(0.5)
        last_expiry = stage.renew(run_id, claim)
        assert last_expiry is not None
    wait_for("the reaper to expire attempt 1", lambda: stage.expired(run_id))

    [attempt] = stage.attempts(run_id)
    row = stage.row(run_id)
    assert (row.state, row.attempt, row.lease_token) == ("scheduled", 1, None)
    assert row.published_at is None  # the planner's outbox publishes attempt 2
    assert attempt.outcome == "lease_expired"
    # Expired after its last lease ran out by the database clock, and promptly: the stream
    # drove it (no scan runs here). Both instants are the database's.
    assert last_expiry is not None
    late = attempt.finished_at - last_expiry
    assert timedelta(0) < late < timedelta(seconds=1.5), late
    assert (reaper.stats.expired, reaper.stats.retried) == (1, 1)
    # The silent worker is fenced: neither its renewal nor its completion lands.
    assert stage.renew(run_id, claim) is None
    assert not stage.complete(run_id, claim)


def test_a_lease_whose_heartbeats_keep_coming_is_never_expired(stage: Stage) -> None:
    reaper = stage.reaper()
    assert reaper.assigned.wait(20)
    kept, dropped = stage.new_run(1), stage.new_run(2)
    kept_claim = stage.claim(kept)
    stage.claim(dropped)  # its worker dies at once
    started = time.monotonic()
    while time.monotonic() - started < 3 * LEASE.total_seconds():
        time.sleep(0.5)
        assert stage.renew(kept, kept_claim) is not None, "the kept lease was taken away"
    assert stage.expired(dropped)
    row = stage.row(kept)
    assert (row.state, row.attempt, row.lease_token) == ("running", 1, kept_claim.lease_token)
    assert [a.outcome for a in stage.attempts(kept)] == [None]
    assert stage.complete(kept, kept_claim)
    assert reaper.stats.expired == 1
    # The stream saw the completion: nothing is watched any more, and every record read may
    # be committed.
    wait_for("the result to be folded", lambda: len(reaper.book) == 0)


def test_two_reapers_share_the_partitions_and_expire_each_run_once(stage: Stage) -> None:
    first, second = stage.reaper(), stage.reaper()
    partitions = stage.catalog.partitions
    heartbeats = {(stage.catalog.heartbeats, p) for p in range(partitions)}

    def shared() -> bool:
        mine, theirs = first.partitions & heartbeats, second.partitions & heartbeats
        return bool(mine) and bool(theirs) and mine | theirs == heartbeats and not mine & theirs

    wait_for("the group to give each reaper its share", shared, timeout=40)
    # Runs on partitions of both reapers, two per partition.
    runs: list[uuid.UUID] = []
    count: dict[int, int] = {}
    n = 0
    while len(runs) < 2 * partitions:
        n += 1
        run_id = run_id_for("leased", stage.scheduled_for + timedelta(hours=n))
        partition = partition_for(str(run_id), partitions)
        if count.get(partition, 0) < 2:
            count[partition] = count.get(partition, 0) + 1
            runs.append(stage.new_run(n))
    for run_id in runs:
        stage.claim(run_id)
    wait_for("every run to expire", lambda: all(stage.expired(r) for r in runs), timeout=30)

    # Each reaper expired the runs of its own partitions, and each run was expired once.
    assert first.stats.expired > 0 and second.stats.expired > 0
    assert first.stats.expired + second.stats.expired == len(runs)
    for run_id in runs:
        assert [(a.attempt, a.outcome) for a in stage.attempts(run_id)] == [(1, "lease_expired")]
        row = stage.row(run_id)
        assert (row.state, row.attempt) == ("scheduled", 1)


def test_a_reaper_that_stops_leaves_its_watched_attempts_to_the_next(stage: Stage) -> None:
    # A clean stop (a rebalance does the same): offsets are committed only up to the oldest
    # heartbeat still backing a watch, so the next reaper reads that attempt again.
    first = stage.reaper()
    assert first.assigned.wait(20)
    done, watched = stage.new_run(1), stage.new_run(2)
    done_claim = stage.claim(done)
    stage.claim(watched, lease=timedelta(seconds=5))
    assert stage.complete(done, done_claim)
    wait_for("both records to be folded", lambda: len(first.book) == 1 and first.book.get(watched))
    first.stop()
    assert not stage.expired(watched)  # still within its lease when the first reaper stopped

    successor = stage.reaper()
    wait_for("the successor to expire the watched attempt", lambda: stage.expired(watched))
    assert successor.stats.expired == 1
    assert [a.outcome for a in stage.attempts(done)] == ["succeeded"]
