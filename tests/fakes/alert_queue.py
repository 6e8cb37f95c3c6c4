"""An in-memory ``AlertQueue`` (the alert sender's port) with the rules of sql/alerts.sql.

tests/integration/test_alert_queue_contract.py runs one contract suite against it and against
``duetime.store.alerts.PgAlertQueue``, so the fake cannot drift.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from duetime.alerts import AlertOutcome, AlertState, ClaimedAlert, NewAlert

__all__ = ["FakeAlertQueue", "QueuedAlert"]


@dataclass
class QueuedAlert:
    alert: NewAlert
    alert_id: int
    created_at: datetime
    state: AlertState = AlertState.PENDING
    attempts: int = 0
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    delivered_at: datetime | None = None


@dataclass
class FakeAlertQueue:
    """Alerts by id; ``tenant_webhooks`` plays the tenants table's ``alert_webhook`` column."""

    alerts: dict[int, QueuedAlert] = field(default_factory=dict)
    tenant_webhooks: dict[str, str] = field(default_factory=dict)
    next_id: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enqueue(self, alerts: Sequence[NewAlert], now: datetime | None = None) -> set[str]:
        """Like ``alerts_enqueue``: returns the subjects new to the queue."""
        created = now or datetime.now(UTC)
        new: set[str] = set()
        with self.lock:
            known = {(q.alert.kind, q.alert.subject) for q in self.alerts.values()}
            for alert in alerts:
                if (alert.kind, alert.subject) in known:
                    continue
                alert_id, self.next_id = self.next_id, self.next_id + 1
                self.alerts[alert_id] = QueuedAlert(alert, alert_id, created)
                known.add((alert.kind, alert.subject))
                new.add(alert.subject)
        return new

    def alerts_claim(self, now: datetime, limit: int, lease: timedelta) -> list[ClaimedAlert]:
        with self.lock:
            due = [
                q
                for q in self.alerts.values()
                if q.state is AlertState.PENDING
                and (q.next_attempt_at is None or q.next_attempt_at <= now)
            ]
            # Never-tried alerts first (NULLS FIRST), then by due time and id.
            due.sort(
                key=lambda q: (q.next_attempt_at is not None, q.next_attempt_at or now, q.alert_id)
            )
            claimed = []
            for q in due[:limit]:
                q.attempts += 1
                q.next_attempt_at = now + lease
                a = q.alert
                claimed.append(
                    ClaimedAlert(
                        alert_id=q.alert_id,
                        kind=a.kind,
                        subject=a.subject,
                        tenant=a.tenant,
                        status=a.status,
                        summary=a.summary,
                        details=dict(a.details),
                        attempt=q.attempts,
                        created_at=q.created_at,
                        tenant_webhook=self.tenant_webhooks.get(a.tenant or ""),
                    )
                )
        return sorted(claimed, key=lambda c: c.alert_id)

    def alerts_finish(self, outcomes: Sequence[AlertOutcome]) -> set[int]:
        recorded: set[int] = set()
        with self.lock:
            for o in outcomes:
                q = self.alerts.get(o.alert_id)
                if q is None or q.attempts != o.attempt or q.state is not AlertState.PENDING:
                    continue
                q.state = o.state
                q.next_attempt_at = o.next_attempt_at
                q.last_error = o.error
                q.delivered_at = o.at if o.state is AlertState.DELIVERED else None
                recorded.add(o.alert_id)
        return recorded

    def alerts_prune(self, before: datetime) -> int:
        with self.lock:
            gone = [
                i
                for i, q in self.alerts.items()
                if q.state is not AlertState.PENDING and q.created_at < before
            ]
            for i in gone:
                del self.alerts[i]
        return len(gone)

    def snapshot(self, alert_id: int) -> QueuedAlert:
        with self.lock:
            return replace(self.alerts[alert_id])
