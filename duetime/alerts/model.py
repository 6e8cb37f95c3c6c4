"""Alerts as values: their kinds, what is enqueued, what a sender claims, what one delivery came to.

The JSON a webhook receives is built here (:func:`alert_body`), once per delivery attempt, from
the enqueued payload plus the queue's identity of the alert. Pure.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from duetime.schedule import RetryPolicy, retry_delay

__all__ = [
    "CONDITION_KINDS",
    "AlertKind",
    "AlertOutcome",
    "AlertState",
    "ClaimedAlert",
    "Detail",
    "NewAlert",
    "alert_body",
    "delivery_outcome",
]

Detail = str | int | float | bool | None


class AlertKind(enum.StrEnum):
    RUN_DEAD = "run.dead"
    OUTBOX_BACKLOG = "outbox.backlog"
    READY_LAG = "ready.lag"
    RELEASE_LATENESS = "release.lateness"


# The kinds raised by a measured condition (they fire and resolve); run.dead is an event.
CONDITION_KINDS = (AlertKind.OUTBOX_BACKLOG, AlertKind.READY_LAG, AlertKind.RELEASE_LATENESS)


class AlertState(enum.StrEnum):
    PENDING = "pending"  # waiting for its first or next attempt, or claimed by a sender
    DELIVERED = "delivered"  # a receiver answered 2xx
    FAILED = "failed"  # attempts exhausted, or an answer that retrying cannot change
    UNROUTED = "unrouted"  # neither the tenant nor the operator has a webhook


@dataclass(frozen=True)
class NewAlert:
    """An alert to enqueue; ``(kind, subject)`` is its identity, enqueued once ever.

    Attributes:
        status: ``firing`` or ``resolved`` (a dead run is ``firing`` and never resolves).
        tenant: Whose alert it is, for routing to the tenant's webhook; None for the operator's.
    """

    kind: AlertKind
    subject: str
    status: str
    summary: str
    tenant: str | None = None
    details: Mapping[str, Detail] = field(default_factory=dict)

    def payload(self) -> dict[str, object]:
        return {"status": self.status, "summary": self.summary, "details": dict(self.details)}


@dataclass(frozen=True)
class ClaimedAlert:
    """An alert a sender claimed for one delivery attempt (``attempt``, counting from 1)."""

    alert_id: int
    kind: AlertKind
    subject: str
    tenant: str | None
    status: str
    summary: str
    details: Mapping[str, Detail]
    attempt: int
    created_at: datetime
    # The tenant's own webhook (tenants.alert_webhook) when it has one.
    tenant_webhook: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class AlertOutcome:
    """What one delivery attempt came to, to record (fenced on ``attempt``).

    ``state`` is ``pending`` for a retry at ``next_attempt_at``; otherwise final, at ``at``.
    """

    alert_id: int
    attempt: int
    state: AlertState
    at: datetime
    next_attempt_at: datetime | None = None
    error: str | None = None


def alert_body(alert: ClaimedAlert) -> bytes:
    """The JSON body POSTed for ``alert`` (compact, keys sorted, UTF-8)."""
    document = {
        "alert_id": alert.alert_id,
        "kind": str(alert.kind),
        "status": alert.status,
        "subject": alert.subject,
        "tenant": alert.tenant,
        "created_at": alert.created_at.isoformat(),
        "summary": alert.summary,
        "details": dict(alert.details),
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _retryable_status(status: int) -> bool:
    return status in (408, 429) or status >= 500


def delivery_outcome(
    alert: ClaimedAlert,
    now: datetime,
    policy: RetryPolicy,
    *,
    status: int | None = None,
    error: str | None = None,
    retryable: bool = True,
) -> AlertOutcome:
    """Classify one attempt: an HTTP ``status``, or a transport ``error`` (``retryable`` or not).

    2xx is delivered. 408, 429 and 5xx are retried, as are timeouts and connection errors. Any
    other answer (3xx: redirects are not followed; 4xx) fails at once: the receiver refuses the
    alert and sending it again will not change that. A retry waits ``retry_delay(policy)`` after
    attempt n (exponential, capped, with a jitter fixed by the alert id); after
    ``policy.max_attempts`` attempts the alert is failed.
    """
    if status is not None and 200 <= status < 300:
        return AlertOutcome(alert.alert_id, alert.attempt, AlertState.DELIVERED, now)
    if status is not None:
        error = f"HTTP {status}"
        retryable = _retryable_status(status)
    if retryable and alert.attempt < policy.max_attempts:
        delay: timedelta = retry_delay(policy, f"alert:{alert.alert_id}", alert.attempt)
        return AlertOutcome(
            alert.alert_id, alert.attempt, AlertState.PENDING, now, now + delay, error
        )
    return AlertOutcome(alert.alert_id, alert.attempt, AlertState.FAILED, now, None, error)
