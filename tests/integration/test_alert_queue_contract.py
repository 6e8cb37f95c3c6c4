"""One contract for the alert sender's queue, run against the in-memory fake and PostgreSQL.

The sender's unit tests trust the fake (tests/fakes/alert_queue.py); this suite is what earns
that trust: an alert is enqueued once per (kind, subject), a claim counts an attempt and hides
the alert for its lease, a stale outcome is ignored, finished alerts are never claimed again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from duetime.alerts import AlertKind, AlertOutcome, AlertQueue, AlertState, NewAlert
from duetime.store import Store
from duetime.store.alerts import PgAlertQueue, alerts_enqueue
from tests.fakes.alert_queue import FakeAlertQueue

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=30)


@dataclass
class Subject:
    queue: AlertQueue
    enqueue: Callable[[Sequence[NewAlert]], set[str]]
    set_webhook: Callable[[str, str], None]


@pytest.fixture(params=["fake", "postgres"])
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "fake":
        fake = FakeAlertQueue()
        yield Subject(fake, fake.enqueue, fake.tenant_webhooks.__setitem__)
        return
    store = Store(request.getfixturevalue("database_url"), pool_size=1)

    def enqueue(alerts: Sequence[NewAlert]) -> set[str]:
        with store.tx() as tx:
            return {subject for _kind, subject in alerts_enqueue(tx, alerts)}

    def set_webhook(tenant: str, url: str) -> None:
        with store.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO tenants (tenant, alert_webhook) VALUES (:t, :u)"),
                {"t": tenant, "u": url},
            )

    yield Subject(PgAlertQueue(store), enqueue, set_webhook)
    store.close()


def _alert(subject: str, tenant: str | None = None) -> NewAlert:
    return NewAlert(AlertKind.RUN_DEAD, subject, "firing", f"{subject} died", tenant, {"n": 1})


def _outcome(
    alert_id: int, attempt: int, state: AlertState, at: datetime, retry_at: datetime | None = None
) -> AlertOutcome:
    return AlertOutcome(alert_id, attempt, state, at, retry_at, None if retry_at is None else "x")


def test_an_alert_is_enqueued_once_per_kind_and_subject(subject: Subject) -> None:
    assert subject.enqueue([_alert("a"), _alert("b")]) == {"a", "b"}
    assert subject.enqueue([_alert("a"), _alert("c")]) == {"c"}
    other_kind = NewAlert(AlertKind.OUTBOX_BACKLOG, "a", "firing", "backlog")
    assert subject.enqueue([other_kind]) == {"a"}
    now = datetime.now(UTC)
    claimed = subject.queue.alerts_claim(now, 10, LEASE)
    assert sorted((str(c.kind), c.subject) for c in claimed) == [
        ("outbox.backlog", "a"),
        ("run.dead", "a"),
        ("run.dead", "b"),
        ("run.dead", "c"),
    ]
    first = next(c for c in claimed if c.subject == "a" and c.kind is AlertKind.RUN_DEAD)
    assert (first.status, first.summary, dict(first.details), first.attempt) == (
        "firing",
        "a died",
        {"n": 1},
        1,
    )


def test_a_claim_hides_the_alert_until_its_lease_runs_out(subject: Subject) -> None:
    subject.enqueue([_alert("a")])
    now = datetime.now(UTC)
    [claim] = subject.queue.alerts_claim(now, 10, LEASE)
    assert subject.queue.alerts_claim(now + LEASE - timedelta(seconds=1), 10, LEASE) == []
    [again] = subject.queue.alerts_claim(now + LEASE, 10, LEASE)
    assert (again.alert_id, again.attempt) == (claim.alert_id, 2)
    # The first claim's late outcome is stale; the second claim's counts.
    assert (
        subject.queue.alerts_finish([_outcome(claim.alert_id, 1, AlertState.DELIVERED, now)])
        == set()
    )
    assert subject.queue.alerts_finish(
        [_outcome(claim.alert_id, 2, AlertState.DELIVERED, now)]
    ) == {claim.alert_id}


@pytest.mark.parametrize("state", [AlertState.DELIVERED, AlertState.FAILED, AlertState.UNROUTED])
def test_finished_alerts_are_never_claimed_again(subject: Subject, state: AlertState) -> None:
    subject.enqueue([_alert("a")])
    now = datetime.now(UTC)
    [claim] = subject.queue.alerts_claim(now, 10, LEASE)
    assert subject.queue.alerts_finish([_outcome(claim.alert_id, 1, state, now)]) == {
        claim.alert_id
    }
    assert subject.queue.alerts_claim(now + timedelta(days=1), 10, LEASE) == []
    # Nor changed by a repeated outcome.
    assert subject.queue.alerts_finish([_outcome(claim.alert_id, 1, state, now)]) == set()


def test_a_retry_is_due_at_its_time(subject: Subject) -> None:
    subject.enqueue([_alert("a")])
    now = datetime.now(UTC)
    [claim] = subject.queue.alerts_claim(now, 10, LEASE)
    retry_at = now + timedelta(seconds=5)
    outcome = _outcome(claim.alert_id, 1, AlertState.PENDING, now, retry_at)
    assert subject.queue.alerts_finish([outcome]) == {claim.alert_id}
    assert subject.queue.alerts_claim(retry_at - timedelta(milliseconds=1), 10, LEASE) == []
    [again] = subject.queue.alerts_claim(retry_at, 10, LEASE)
    assert again.attempt == 2


def test_claims_take_never_tried_alerts_first_up_to_the_limit(subject: Subject) -> None:
    subject.enqueue([_alert("retry")])
    now = datetime.now(UTC)
    [claim] = subject.queue.alerts_claim(now, 10, LEASE)
    subject.queue.alerts_finish([_outcome(claim.alert_id, 1, AlertState.PENDING, now, now)])
    subject.enqueue([_alert("new-1"), _alert("new-2")])
    first = subject.queue.alerts_claim(now, 2, LEASE)
    assert [c.subject for c in first] == ["new-1", "new-2"]
    assert [c.subject for c in subject.queue.alerts_claim(now, 2, LEASE)] == ["retry"]


def test_a_claim_carries_the_tenant_webhook(subject: Subject) -> None:
    subject.set_webhook("acme", "https://hooks.example/acme")
    subject.enqueue([_alert("a", "acme"), _alert("g", "globex"), _alert("o")])
    claimed = {c.subject: c for c in subject.queue.alerts_claim(datetime.now(UTC), 10, LEASE)}
    assert claimed["a"].tenant_webhook == "https://hooks.example/acme"
    assert claimed["g"].tenant_webhook is None and claimed["g"].tenant == "globex"
    assert claimed["o"].tenant_webhook is None and claimed["o"].tenant is None


def test_prune_deletes_only_finished_alerts_raised_before_the_cut(subject: Subject) -> None:
    subject.enqueue([_alert("done"), _alert("waiting")])
    now = datetime.now(UTC)
    claimed = {c.subject: c for c in subject.queue.alerts_claim(now, 10, LEASE)}
    done = claimed["done"]
    subject.queue.alerts_finish([_outcome(done.alert_id, 1, AlertState.DELIVERED, now)])
    assert subject.queue.alerts_prune(now - timedelta(days=1)) == 0
    assert subject.queue.alerts_prune(now + timedelta(days=1)) == 1
    # The pending one was kept: it is due again once its lease runs out.
    assert [c.subject for c in subject.queue.alerts_claim(now + LEASE, 10, LEASE)] == ["waiting"]
