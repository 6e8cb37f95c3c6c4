"""The alert queue on PostgreSQL (sql/alerts.sql), and the measurements behind condition alerts.

``alerts_enqueue`` runs inside the caller's transaction, so an alert is raised atomically with
what made it true (a condition's transition) or with the read that found it (a dead run).
``PgAlertQueue`` is the sender's port (``duetime.alerts.AlertQueue``): each call is one short
transaction of its own, and the sender talks to webhooks only between them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from duetime.alerts import (
    AlertKind,
    AlertOutcome,
    ClaimedAlert,
    ConditionState,
    NewAlert,
)

from .queries import query
from .rows import batch_json, iso_or_none
from .store import Store, Tx

__all__ = [
    "LatenessSample",
    "OutboxBacklog",
    "PgAlertQueue",
    "alert_condition_lock",
    "alert_condition_save",
    "alerts_enqueue",
    "alerts_list",
    "runs_outbox_backlog",
    "runs_release_lateness",
]


def _rows(tx: Tx, name: str, params: dict[str, Any]) -> Sequence[Any]:
    return tx.conn.execute(query(name), params).all()


def alerts_enqueue(tx: Tx, alerts: Sequence[NewAlert]) -> set[tuple[str, str]]:
    """Raise ``alerts`` in one statement; returns the (kind, subject) of those new to the queue."""
    if not alerts:
        return set()
    rows = [
        {
            "kind": str(a.kind),
            "subject": a.subject,
            "tenant": a.tenant,
            "payload": a.payload(),
        }
        for a in alerts
    ]
    return {(r.kind, r.subject) for r in _rows(tx, "alerts_enqueue", {"rows": batch_json(rows)})}


def _claimed(row: Any) -> ClaimedAlert:
    payload = json.loads(row.payload) if isinstance(row.payload, str) else row.payload
    return ClaimedAlert(
        alert_id=int(row.alert_id),
        kind=AlertKind(row.kind),
        subject=row.subject,
        tenant=row.tenant,
        status=payload["status"],
        summary=payload["summary"],
        details=payload.get("details") or {},
        attempt=int(row.attempts),
        created_at=row.created_at,
        tenant_webhook=row.tenant_webhook or None,
    )


class PgAlertQueue:
    """``duetime.alerts.AlertQueue`` on PostgreSQL; every method is one short transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def alerts_claim(self, now: datetime, limit: int, lease: timedelta) -> list[ClaimedAlert]:
        with self.store.tx() as tx:
            rows = _rows(
                tx, "alerts_claim", {"now": now, "limit": limit, "lease_until": now + lease}
            )
        return sorted((_claimed(r) for r in rows), key=lambda a: a.alert_id)

    def alerts_finish(self, outcomes: Sequence[AlertOutcome]) -> set[int]:
        if not outcomes:
            return set()
        rows = [
            {
                "alert_id": o.alert_id,
                "attempt": o.attempt,
                "state": str(o.state),
                "at": o.at.isoformat(),
                "next_attempt_at": iso_or_none(o.next_attempt_at),
                "error": o.error,
            }
            for o in outcomes
        ]
        with self.store.tx() as tx:
            found = _rows(tx, "alerts_finish", {"rows": batch_json(rows)})
        return {int(r.alert_id) for r in found}

    def alerts_prune(self, before: datetime) -> int:
        with self.store.tx() as tx:
            return int(tx.conn.execute(query("alerts_prune"), {"before": before}).rowcount)


def alerts_list(store: Store, state: str | None = None, limit: int = 100) -> Sequence[Any]:
    """The latest alerts, newest first (for the CLI and tests)."""
    with store.tx() as tx:
        return _rows(tx, "alerts_list", {"state": state, "limit": limit})


def alert_condition_lock(tx: Tx, kind: AlertKind) -> ConditionState:
    """The condition's state, its row locked until ``tx`` ends (created on first use)."""
    tx.conn.execute(query("alert_condition_create"), {"kind": str(kind)})
    row = _rows(tx, "alert_condition_lock", {"kind": str(kind)})[0]
    return ConditionState(row.firing, int(row.episode), row.pending_since)


def alert_condition_save(
    tx: Tx, kind: AlertKind, state: ConditionState, value: float | None, checked_at: datetime
) -> None:
    tx.conn.execute(
        query("alert_condition_save"),
        {
            "kind": str(kind),
            "firing": state.firing,
            "episode": state.episode,
            "pending_since": state.pending_since,
            "value": value,
            "checked_at": checked_at,
        },
    )


@dataclass(frozen=True)
class OutboxBacklog:
    runs: int
    oldest_due_at: datetime | None


def runs_outbox_backlog(tx: Tx, age: timedelta, cap: int) -> OutboxBacklog:
    """Scheduled runs unpublished although due more than ``age`` ago, counted up to ``cap``."""
    row = _rows(tx, "runs_outbox_backlog", {"age_seconds": age.total_seconds(), "cap": cap})[0]
    return OutboxBacklog(int(row.backlog), row.oldest_due_at)


@dataclass(frozen=True)
class LatenessSample:
    runs: int
    p99: timedelta | None
    worst: timedelta | None


def runs_release_lateness(tx: Tx, window: timedelta, limit: int) -> LatenessSample:
    """Release lateness of the first attempts of the runs due within the last ``window``."""
    row = _rows(
        tx, "runs_release_lateness", {"window_seconds": window.total_seconds(), "limit": limit}
    )[0]
    if not row.runs:
        return LatenessSample(0, None, None)
    return LatenessSample(
        int(row.runs),
        timedelta(seconds=float(row.p99_seconds)),
        timedelta(seconds=float(row.max_seconds)),
    )
