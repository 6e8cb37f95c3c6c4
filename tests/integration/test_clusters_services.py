"""Workers, dispatcher and reaper over two PostgreSQL clusters (two databases of the session's
server, ``cluster_urls``): every statement about a run goes to the cluster of its job's shard,
and the alert queue is the home cluster's."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from sqlalchemy import text

from duetime.bus.kafka import create_topics, producer_config
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.jobdef import parse_job
from duetime.model import HttpTarget, KafkaTarget, RunEvent, run_id_for
from duetime.shard_map import ShardMap
from duetime.store import NewRun, Store
from duetime.store.alerts import alerts_list
from duetime.store.clusters import ClusterStores
from duetime.store.jobs import jobs_apply
from duetime.store.leases import LeaseCheck
from duetime_dispatcher.recorder import EmittedRecorder
from duetime_reaper.clusters import ClusterJudge
from duetime_reaper.expiry import LeaseExpirer
from duetime_reaper.reaper import Reaper
from duetime_workers.attempt import AttemptRunner
from duetime_workers.blocking import BlockingCalls
from duetime_workers.config import WorkerConfig
from duetime_workers.lanes import ClusterRunStores
from tests.unit.test_dispatcher_fast_path import FakeProducer, release_of
from tests.unit.test_worker_attempt import FakeEvents
from tests.unit.test_worker_lanes import GatedTargets

pytestmark = pytest.mark.integration

SCHEDULED = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def clusters(cluster_urls: tuple[str, str]) -> Iterator[ClusterStores]:
    stores = ClusterStores(ShardMap.even(cluster_urls), pool_size=2)
    yield stores
    stores.close()


def _job_on(clusters: ClusterStores, cluster: int, prefix: str) -> str:
    n = 0
    while clusters.shard_map.cluster_of_job(f"{prefix}-{n}") != cluster:
        n += 1
    return f"{prefix}-{n}"


def _add_run(store: Store, job_id: str, max_attempts: int = 3) -> uuid.UUID:
    """A job (retries 0.1 s apart) and one scheduled run of it, in ``store``'s cluster."""
    job = parse_job(
        {
            "id": job_id,
            "schedule": {"interval": "PT1H"},
            "target": {"http": {"url": "https://example.com"}},
            "retry": {"max_attempts": max_attempts, "initial_interval_seconds": 0.1},
        }
    )
    run_id = run_id_for(job_id, SCHEDULED)
    with store.tx() as tx:
        jobs_apply(tx, [job])
        tx.runs_ensure_partition(SCHEDULED.date())
        tx.runs_insert(
            [NewRun(run_id, job_id, "default", "example.com", SCHEDULED, SCHEDULED, max_attempts)]
        )
    return run_id


def _rows(store: Store) -> dict[uuid.UUID, Any]:
    with store.engine.begin() as conn:
        return {r.run_id: r for r in conn.execute(text("SELECT * FROM runs"))}


def _event(run_id: uuid.UUID, job_id: str, *, kafka: bool = False) -> RunEvent:
    return RunEvent(
        run_id=run_id,
        job_id=job_id,
        tenant="default",
        scheduled_for=SCHEDULED,
        due_at=SCHEDULED,
        attempt=1,
        max_attempts=3,
        target_service="example.com",
        target=KafkaTarget(topic="orders", key=None, value="x")
        if kafka
        else HttpTarget(url="https://example.com/hook"),
        lease=timedelta(seconds=1),
        heartbeat_interval=timedelta(seconds=0.2),
    )


async def test_a_worker_batch_claims_renews_and_completes_each_run_in_its_cluster(
    clusters: ClusterStores,
) -> None:
    jobs = ["job-a", "job-b"]
    job_ids = [_job_on(clusters, cluster, job) for cluster, job in enumerate(jobs)]
    runs = [
        _event(_add_run(clusters.stores[cluster], job_id), job_id)
        for cluster, job_id in enumerate(job_ids)
    ]
    gates = {job_id: asyncio.Event() for job_id in job_ids}
    targets = GatedTargets(gates)
    events = FakeEvents()
    calls = BlockingCalls(max_workers=8, name="test-db")
    runner = AttemptRunner(
        config=WorkerConfig(worker_id="w-clusters"),
        store=ClusterRunStores(clusters.stores, clusters.shard_map.cluster_of_job),
        events=events,
        targets=targets,
        calls=calls,
        stopping=asyncio.Event(),
    )
    runner.start()
    try:
        tasks = [asyncio.create_task(runner.run(run)) for run in runs]
        # Held past a 1 s lease's local deadline (0.5 s): only renewals in the run's own
        # cluster keep it (a renewal asked of the other cluster matches nothing: lease lost).
        deadline = time.monotonic() + 10
        while runner.statements()["renewal_statements"] < 6:
            assert time.monotonic() < deadline, "no lease renewals"
            await asyncio.sleep(0.05)
        for gate in gates.values():
            gate.set()
        reports = await asyncio.gather(*tasks)
    finally:
        await runner.stop()
        calls.shutdown()
    assert [report.status for report in reports] == ["succeeded", "succeeded"]
    for cluster, run in enumerate(runs):
        rows = _rows(clusters.stores[cluster])
        assert list(rows) == [run.run_id]  # nothing of the other cluster's run here
        row = rows[run.run_id]
        assert (row.state, row.attempt, row.worker) == ("succeeded", 1, "w-clusters")
    assert {heartbeat.run_id for heartbeat in events.heartbeats} == {r.run_id for r in runs}


def test_the_reaper_reissues_an_expired_lease_in_the_second_cluster_and_alerts_at_home(
    clusters: ClusterStores, stack: Any
) -> None:
    settings = Settings(
        database_url=clusters.shard_map.home_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        topic_prefix=f"c{uuid.uuid4().hex[:8]}.",
    )
    create_topics(settings)
    home, second = clusters.stores
    job_id = _job_on(clusters, 1, "reaped")
    run_id = _add_run(second, job_id, max_attempts=2)
    reaper = Reaper(
        clusters.home,
        Producer(producer_config(settings)),
        TopicCatalog(settings.topic_prefix),
        clusters=clusters.stores,
    )

    claim = second.runs_claim(run_id, SCHEDULED, 1, "w-gone", timedelta(milliseconds=100))
    assert claim is not None
    time.sleep(0.3)
    stats = reaper.run_once()
    assert (stats.expired, stats.retried, stats.dead) == (1, 1, 0)
    row = _rows(second)[run_id]
    assert (row.state, row.attempt, row.lease_token) == ("scheduled", 1, None)
    assert _rows(home) == {}

    # The last attempt expires too: dead in its cluster, its alert in the home cluster's queue.
    time.sleep(0.2)  # the retry's backoff (0.1 s) before attempt 2 may be claimed
    claim = second.runs_claim(run_id, SCHEDULED, 2, "w-gone", timedelta(milliseconds=100))
    assert claim is not None
    time.sleep(0.3)
    stats = reaper.run_once()
    assert (stats.expired, stats.dead, stats.dead_published) == (1, 1, 1)
    row = _rows(second)[run_id]
    assert row.state == "dead" and row.dead_published_at is not None
    [alert] = alerts_list(home)
    assert alert.subject == str(run_id)
    assert alerts_list(second) == []
    assert reaper.run_once().dead_published == 0  # published once, alerted once


def test_a_cluster_that_is_down_does_not_stop_the_scan_of_the_others(
    clusters: ClusterStores, cluster_urls: tuple[str, str], stack: Any
) -> None:
    second = clusters.stores[1]
    run_id = _add_run(second, _job_on(clusters, 1, "scanned"))
    assert second.runs_claim(run_id, SCHEDULED, 1, "w-gone", timedelta(milliseconds=100))
    gone = _unreachable(cluster_urls)
    settings = Settings(database_url=cluster_urls[0], kafka_bootstrap=stack.kafka_bootstrap)
    producer = Producer(producer_config(settings))
    reaper = Reaper(gone, producer, TopicCatalog("unused."), clusters=[gone, second])
    time.sleep(0.3)
    try:
        assert reaper.expire_leases().retried == 1  # cluster 0 failed (logged), 1 was scanned
    finally:
        gone.close()
    assert _rows(second)[run_id].state == "scheduled"


def _unreachable(cluster_urls: tuple[str, str]) -> Store:
    """A store of a database that does not exist: every statement fails."""
    return Store(cluster_urls[0].rsplit("/", 1)[0] + "/no_such_database", pool_size=1)


def test_the_stream_judges_a_lease_in_whichever_cluster_holds_it(
    clusters: ClusterStores,
) -> None:
    second = clusters.stores[1]
    run_id = _add_run(second, _job_on(clusters, 1, "watched"))
    assert second.runs_claim(run_id, SCHEDULED, 1, "w-gone", timedelta(milliseconds=100))
    judge = ClusterJudge([LeaseExpirer(store, batch_size=10) for store in clusters])
    stranger = LeaseCheck(uuid.uuid4(), SCHEDULED, 1)  # in neither cluster: no longer running
    time.sleep(0.3)
    judgement = judge.judge([LeaseCheck(run_id, SCHEDULED, 1), stranger])
    assert judgement.ended == {(run_id, 1)}
    assert not judgement.alive and not judgement.locked_expired
    assert _rows(second)[run_id].state == "scheduled"


def test_a_cluster_that_cannot_answer_leaves_its_possible_runs_watched(
    clusters: ClusterStores, cluster_urls: tuple[str, str]
) -> None:
    second = clusters.stores[1]
    run_id = _add_run(second, _job_on(clusters, 1, "watched"))
    assert second.runs_claim(run_id, SCHEDULED, 1, "w-gone", timedelta(seconds=30))
    gone = _unreachable(cluster_urls)
    try:
        judge = ClusterJudge(
            [LeaseExpirer(gone, batch_size=10), LeaseExpirer(second, batch_size=10)]
        )
        stranger = LeaseCheck(uuid.uuid4(), SCHEDULED, 1)
        judgement = judge.judge([LeaseCheck(run_id, SCHEDULED, 1), stranger])
    finally:
        gone.close()
    assert set(judgement.alive) == {(run_id, 1)}  # the answering cluster's, still leased
    assert judgement.locked_expired == {(stranger.run_id, 1)}  # maybe the silent cluster's


def test_the_dispatcher_recorder_writes_each_emitted_run_in_its_cluster(
    clusters: ClusterStores,
) -> None:
    job_ids = [_job_on(clusters, cluster, "emitted") for cluster in (0, 1)]
    runs = [
        _event(_add_run(clusters.stores[cluster], job_id), job_id, kafka=True)
        for cluster, job_id in enumerate(job_ids)
    ]
    recorder: EmittedRecorder[str] = EmittedRecorder(
        clusters.home,
        FakeProducer(),  # type: ignore[arg-type]
        "duetime.runs.results",
        "dispatcher:host-1",
        clusters=clusters,
    )
    releases = [release_of(run, n) for n, run in enumerate(runs)]
    for release, emission in releases:
        recorder.add(release, emission, datetime.now(UTC))
    assert asyncio.run(recorder.flush()) == [release for release, _ in releases]
    assert recorder.recorded == 2
    for cluster, run in enumerate(runs):
        rows = _rows(clusters.stores[cluster])
        assert list(rows) == [run.run_id]
        row = rows[run.run_id]
        assert (row.state, row.attempt, row.worker) == ("succeeded", 1, "dispatcher:host-1")
