"""Alerts on the real stack: dead runs alerted once, signed, routed per tenant, retried, never
blocking the reaper; and each condition alert raised from real data.

The webhook is the recording target (tests/fixtures/target.py). Leases are expired by moving
``lease_expires_at`` into the past, not by waiting for them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from sqlalchemy import text

from duetime.alerts import (
    SIGNATURE_HEADER,
    AlertKind,
    SignatureError,
    Transition,
    tenant_secret,
    verify,
)
from duetime.bus.kafka import consumer_config, create_topics, producer_config
from duetime.bus.lag import ConsumerLagProbe
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.model import run_id_for
from duetime.store import NewRun, Store
from duetime.store.alerts import PgAlertQueue, alerts_list
from duetime_reaper.alert_config import AlertConfig
from duetime_reaper.alert_sender import AlertSender
from duetime_reaper.alerting import Alerting
from duetime_reaper.conditions import ConditionChecks
from duetime_reaper.reaper import Reaper
from tests.fixtures.target import RecordingTarget

pytestmark = pytest.mark.integration

SECRET = "integration-secret"


@dataclass
class Env:
    settings: Settings
    catalog: TopicCatalog
    store: Store
    producer: Producer

    def reaper(self) -> Reaper:
        return Reaper(self.store, self.producer, self.catalog)

    def sql(self, statement: str, **params: Any) -> list[Any]:
        with self.store.engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []

    def run(self, job_id: str, *, tenant: str = "default", late: timedelta = timedelta(0)) -> Any:
        """A scheduled run of ``job_id``, due ``late`` ago (one attempt only)."""
        due = datetime.now(UTC).replace(microsecond=0) - late
        run_id = run_id_for(job_id, due)
        with self.store.tx() as tx:
            tx.runs_ensure_partition(due.date())
            tx.runs_insert([NewRun(run_id, job_id, tenant, "svc", due, due, 1)])
        return run_id, due

    def claim(self, run: Any) -> None:
        run_id, due = run
        assert self.store.runs_claim(run_id, due, 1, "w-gone", timedelta(minutes=5)) is not None

    def expire(self, run: Any) -> None:
        """The worker that claimed ``run`` went silent long ago."""
        self.sql(
            "UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = :r",
            r=run[0],
        )

    def dead_run(self, job_id: str, tenant: str = "default") -> uuid.UUID:
        run = self.run(job_id, tenant=tenant)
        self.claim(run)
        self.expire(run)
        return run[0]  # type: ignore[no-any-return]


@pytest.fixture
def env(database_url: str, stack: Any) -> Iterator[Env]:
    settings = Settings(
        database_url=database_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        topic_prefix=f"a{uuid.uuid4().hex[:8]}.",
    )
    create_topics(settings)
    store = Store(database_url, pool_size=4, application_name="duetime-alert-test")
    producer = Producer(producer_config(settings))
    yield Env(settings, TopicCatalog(settings.topic_prefix), store, producer)
    producer.flush(5)
    store.close()


def _config(receiver: RecordingTarget, **settings: Any) -> AlertConfig:
    base = AlertConfig(
        webhook=f"{receiver.url}/ops",
        secret=SECRET,
        timeout=timedelta(seconds=5),
        hold=timedelta(0),
        allow_private=True,
    )
    return replace(base, **settings)


async def test_a_dead_run_is_alerted_exactly_once_and_signed(
    env: Env, http_target: RecordingTarget
) -> None:
    run_id = env.dead_run("dies")
    sender = AlertSender(PgAlertQueue(env.store), _config(http_target))
    # Two reapers, several rounds each, and the sender between them.
    reapers = [env.reaper(), env.reaper()]
    stats = reapers[0].run_once()
    assert (stats.expired, stats.dead, stats.dead_published) == (1, 1, 1)
    try:
        for _ in range(3):
            for reaper in reapers:
                assert reaper.run_once().dead_published == 0
            await sender.run_once()
    finally:
        await sender.aclose()

    [delivery] = http_target.matching("")
    body = json.loads(delivery.body)
    assert (body["kind"], body["status"], body["subject"]) == ("run.dead", "firing", str(run_id))
    assert body["details"]["job_id"] == "dies" and body["details"]["attempts"] == 1
    assert "lease expired" in body["details"]["last_error"]
    now = datetime.now(UTC)
    verify(delivery.headers[SIGNATURE_HEADER], delivery.body, SECRET, now)
    tampered = delivery.body.replace(b"dies", b"ok!!")
    with pytest.raises(SignatureError):
        verify(delivery.headers[SIGNATURE_HEADER], tampered, SECRET, now)
    [row] = alerts_list(env.store)
    assert (row.kind, row.subject, row.state, row.attempts) == (
        "run.dead",
        str(run_id),
        "delivered",
        1,
    )


async def test_alerts_are_routed_to_the_tenant_webhook_when_it_has_one(
    env: Env, http_target: RecordingTarget
) -> None:
    env.sql(
        "INSERT INTO tenants (tenant, alert_webhook) VALUES ('acme', :u), ('globex', NULL)",
        u=f"{http_target.url}/acme",
    )
    acme = env.dead_run("acme-job", tenant="acme")
    globex = env.dead_run("globex-job", tenant="globex")
    env.reaper().run_once()
    sender = AlertSender(PgAlertQueue(env.store), _config(http_target))
    try:
        assert (await sender.run_once()).delivered == 2
    finally:
        await sender.aclose()
    now = datetime.now(UTC)
    [to_acme] = http_target.matching("/acme")
    assert json.loads(to_acme.body)["subject"] == str(acme)
    verify(to_acme.headers[SIGNATURE_HEADER], to_acme.body, tenant_secret(SECRET, "acme"), now)
    [to_ops] = http_target.matching("/ops")
    assert json.loads(to_ops.body)["subject"] == str(globex)
    verify(to_ops.headers[SIGNATURE_HEADER], to_ops.body, SECRET, now)


async def test_a_failing_webhook_is_retried_with_backoff_then_failed(
    env: Env, http_target: RecordingTarget
) -> None:
    http_target.status = 500
    env.dead_run("dies")
    env.reaper().run_once()
    clock_now = [datetime.now(UTC)]
    config = _config(
        http_target,
        max_attempts=3,
        backoff_initial=timedelta(seconds=30),
        backoff_max=timedelta(minutes=10),
    )
    sender = AlertSender(PgAlertQueue(env.store), config, clock=lambda: clock_now[0])
    waits = []
    try:
        for attempt in (1, 2):
            assert (await sender.run_once()).retrying == 1
            [row] = alerts_list(env.store)
            assert (row.state, row.attempts, row.last_error) == ("pending", attempt, "HTTP 500")
            wait = row.next_attempt_at - clock_now[0]
            waits.append(wait)
            clock_now[0] += wait - timedelta(seconds=1)
            assert (await sender.run_once()).claimed == 0  # not before its backoff
            clock_now[0] += timedelta(seconds=1)
        assert (await sender.run_once()).failed == 1
        clock_now[0] += timedelta(hours=1)
        assert (await sender.run_once()).claimed == 0
    finally:
        await sender.aclose()
    assert len(http_target.matching("")) == 3
    assert timedelta(seconds=24) <= waits[0] <= timedelta(seconds=30)
    assert timedelta(seconds=48) <= waits[1] <= timedelta(seconds=60)
    [row] = alerts_list(env.store)
    assert (row.state, row.attempts, row.delivered_at) == ("failed", 3, None)


def test_a_hung_webhook_delays_no_lease_expiry_and_holds_no_transaction(
    env: Env, http_target: RecordingTarget
) -> None:
    http_target.hang()
    env.dead_run("dies-first")
    reaper = env.reaper()
    assert reaper.run_once().dead_published == 1
    config = _config(http_target, timeout=timedelta(seconds=60))
    alerting = Alerting(AlertSender(PgAlertQueue(env.store), config), None)
    alerting.start()
    try:
        # The alert's delivery is stuck in the receiver from here on.
        assert http_target.hanging.wait(30)
        # Meanwhile another run's worker goes silent: its lease expires on the next round.
        other = env.run("other")
        env.claim(other)
        env.expire(other)
        stats = reaper.run_once()
        assert (stats.expired, stats.dead) == (1, 1)
        assert http_target.hanging.is_set() and len(http_target.matching("")) == 1
        [state] = env.sql("SELECT state FROM runs WHERE run_id = :r", r=other[0])
        assert state.state == "dead"
        # No session of this database sits in a transaction while the webhook hangs.
        idle = env.sql(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE 'idle in transaction%'"
        )
        assert idle[0].n == 0
        pending = [r for r in alerts_list(env.store) if r.state == "pending"]
        assert len(pending) == 2  # the stuck one (claimed) and the new dead run's
    finally:
        http_target.release()
        alerting.stop()


@pytest.fixture
def lag_probe(env: Env) -> Iterator[ConsumerLagProbe]:
    probe = ConsumerLagProbe(env.settings, env.catalog.workers_group, env.catalog.ready)
    yield probe
    probe.close()


def _checks(
    env: Env, receiver: RecordingTarget, lag: ConsumerLagProbe | None = None, **settings: Any
) -> ConditionChecks:
    """Condition checks with only the conditions given in ``settings`` on."""
    config = _config(
        receiver, **{"outbox_backlog": None, "ready_lag": None, "lateness_p99": None, **settings}
    )
    return ConditionChecks(env.store, config, lag)


async def _deliver(env: Env, receiver: RecordingTarget) -> list[dict[str, Any]]:
    sender = AlertSender(PgAlertQueue(env.store), _config(receiver))
    try:
        await sender.run_once()
    finally:
        await sender.aclose()
    return [json.loads(d.body) for d in receiver.matching("")]


async def test_outbox_backlog_fires_once_then_resolves(
    env: Env, http_target: RecordingTarget
) -> None:
    checks = _checks(env, http_target, outbox_backlog=3, outbox_age=timedelta(seconds=60))
    now = datetime.now(UTC)
    late = [env.run(f"stuck-{n}", late=timedelta(minutes=2 + n)) for n in range(3)]
    env.run("fresh", late=timedelta(seconds=10))  # due, but not for long enough to count
    assert checks.run_once(now) == {AlertKind.OUTBOX_BACKLOG: Transition.FIRED}
    assert checks.run_once(now + timedelta(seconds=15)) == {}  # still firing: nothing new
    [fired] = await _deliver(env, http_target)
    assert (fired["kind"], fired["status"], fired["subject"]) == (
        "outbox.backlog",
        "firing",
        "1.firing",
    )
    assert fired["details"]["runs"] == 3 and fired["details"]["threshold"] == 3

    # The planner catches up.
    for run_id, _due in late:
        env.sql("UPDATE runs SET published_at = now() WHERE run_id = :r", r=run_id)
    raised = checks.run_once(now + timedelta(seconds=30))
    assert raised == {AlertKind.OUTBOX_BACKLOG: Transition.RESOLVED}
    delivered = await _deliver(env, http_target)
    assert [(d["status"], d["subject"]) for d in delivered] == [
        ("firing", "1.firing"),
        ("resolved", "1.resolved"),
    ]


def test_ready_lag_fires_when_the_workers_fall_behind_and_resolves_when_they_commit(
    env: Env, http_target: RecordingTarget, lag_probe: ConsumerLagProbe
) -> None:
    checks = _checks(env, http_target, lag_probe, ready_lag=5)
    now = datetime.now(UTC)
    assert checks.run_once(now) == {}
    # One record per batch: the embedded broker's high watermark is the last batch's base
    # offset + 1, so records batched together would count as one (docs/runs.md, "Alerts").
    for n in range(5):
        env.producer.produce(env.catalog.ready, b"x", str(n).encode())
        assert env.producer.flush(10) == 0
    assert checks.run_once(now + timedelta(seconds=1)) == {AlertKind.READY_LAG: Transition.FIRED}
    [row] = alerts_list(env.store)
    payload = row.payload if isinstance(row.payload, dict) else json.loads(row.payload)
    assert row.kind == "ready.lag" and payload["details"]["records"] == 5
    assert payload["details"]["group"] == env.catalog.workers_group

    # The workers' group commits everything there is.
    committer = Consumer(consumer_config(env.settings, env.catalog.workers_group))
    try:
        partitions = committer.list_topics(env.catalog.ready, timeout=10).topics[env.catalog.ready]
        offsets = []
        for p in partitions.partitions:
            _low, high = committer.get_watermark_offsets(
                TopicPartition(env.catalog.ready, p), timeout=10
            )
            offsets.append(TopicPartition(env.catalog.ready, p, high))
        committer.commit(offsets=offsets, asynchronous=False)
    finally:
        committer.close()
    raised = checks.run_once(now + timedelta(seconds=2))
    assert raised == {AlertKind.READY_LAG: Transition.RESOLVED}


def test_release_lateness_fires_when_the_p99_exceeds_the_threshold(
    env: Env, http_target: RecordingTarget
) -> None:
    checks = _checks(env, http_target, lateness_p99=timedelta(seconds=5))
    now = datetime.now(UTC)
    # Twenty runs released about a second late: under the threshold.
    for n in range(20):
        env.claim(env.run(f"prompt-{n}", late=timedelta(seconds=1)))
    assert checks.run_once(now) == {}
    [sample] = env.sql("SELECT value FROM alert_conditions WHERE kind = 'release.lateness'")
    assert 0.5 <= sample.value < 5
    # Then runs start 40 s after they were due (started, or still waiting).
    for n in range(3):
        env.claim(env.run(f"late-{n}", late=timedelta(seconds=40)))
    # Waiting ones count too, in the outbox or published and not claimed yet.
    env.run("waiting", late=timedelta(seconds=40))
    published = env.run("waiting-published", late=timedelta(seconds=40))
    env.sql("UPDATE runs SET published_at = now() WHERE run_id = :r", r=published[0])
    raised = checks.run_once(now + timedelta(seconds=15))
    assert raised == {AlertKind.RELEASE_LATENESS: Transition.FIRED}
    [row] = alerts_list(env.store)
    payload = row.payload if isinstance(row.payload, dict) else json.loads(row.payload)
    assert payload["details"]["runs"] == 25
    assert payload["details"]["p99_seconds"] >= 39
