"""Dead runs: raise each one's alert once, and put it on ``runs.dead``.

A round reads a batch of dead runs not yet on the dead topic and, in the same short
transaction, enqueues a ``run.dead`` alert for each (``alerts_enqueue``: the alert's subject is
the run id, so a run already alerted is left alone, and the ERROR log line is written only for
the alerts new to the queue). Only then, outside any transaction, are the records produced and
the broker's acknowledgements awaited; a second short transaction marks the acknowledged runs
published. So the alert does not wait for the broker (a broker outage is exactly when runs
die), no transaction is open across a flush, and the webhook is the alert sender's business
(``alert_sender``), never this loop's.

Two reapers (or a reaper that crashed between produce and mark) may both publish a dead record:
``runs.dead`` is at-least-once, keyed by run id, like every other topic.

With several PostgreSQL clusters a dead run's row is in its job's cluster and the alert queue in
the home cluster (``alerts``): for the other clusters the alerts are enqueued in a transaction of
the home cluster's, after the read and before anything is published. A run is marked published
only after its alert is in the queue, and enqueueing is idempotent by subject, so a failure
between the two clusters leaves the run to the next round, which raises nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from confluent_kafka import Producer

from duetime.alerts import AlertKind, NewAlert
from duetime.bus.kafka import DeliveryTracker
from duetime.bus.records import RUN_DEAD
from duetime.bus.topics import TopicCatalog
from duetime.events import RunDead
from duetime.logs import event
from duetime.store import Store
from duetime.store.alerts import alerts_enqueue

__all__ = ["DeadRunPublisher", "dead_run_alert"]

log = logging.getLogger("duetime.reaper")


def dead_run_alert(record: RunDead) -> NewAlert:
    return NewAlert(
        kind=AlertKind.RUN_DEAD,
        subject=str(record.run_id),
        status="firing",
        summary=(
            f"run {record.run_id} of job {record.job_id} is dead after "
            f"{record.attempts} attempt{'s' if record.attempts != 1 else ''}"
        ),
        tenant=record.tenant,
        details={
            "run_id": str(record.run_id),
            "job_id": record.job_id,
            "scheduled_for": record.scheduled_for.isoformat(),
            "attempts": record.attempts,
            "dead_at": record.dead_at.isoformat() if record.dead_at else None,
            "last_error": record.last_error,
        },
    )


def _record(row: Any) -> RunDead:
    return RunDead(
        run_id=row.run_id,
        job_id=row.job_id,
        tenant=row.tenant,
        scheduled_for=row.scheduled_for,
        attempts=row.attempt,
        dead_at=row.finished_at,
        last_error=row.last_error,
    )


class DeadRunPublisher:
    def __init__(
        self,
        store: Store,
        producer: Producer,
        catalog: TopicCatalog,
        *,
        batch_size: int,
        publish_timeout: timedelta,
        alerts: Store | None = None,
    ) -> None:
        """``store``: the cluster whose dead runs this publishes; ``alerts``: the home cluster,
        which keeps the alert queue (None: ``store`` is the home cluster)."""
        self.store = store
        self.alerts = alerts if alerts is not None else store
        self.producer = producer
        self.catalog = catalog
        self.batch_size = batch_size
        self.publish_timeout = publish_timeout

    def run_once(self) -> int:
        """Alert and publish a batch of dead runs; returns how many the broker acknowledged."""
        with self.store.tx() as tx:
            records = [_record(r) for r in tx.runs_get_dead_unpublished(self.batch_size)]
            if not records:
                return 0
            alerts = [dead_run_alert(r) for r in records]
            # In the same transaction when this is the home cluster (one cluster: always).
            raised = alerts_enqueue(tx, alerts) if self.alerts is self.store else None
        if raised is None:
            with self.alerts.tx() as home:
                raised = alerts_enqueue(home, alerts)
        self._log_new(records, {subject for _kind, subject in raised})
        acked = self._publish(records)
        if acked:
            with self.store.tx() as tx:
                for record in acked:
                    tx.runs_mark_dead_published(record.run_id, record.scheduled_for)
        return len(acked)

    def _log_new(self, records: Sequence[RunDead], raised: set[str]) -> None:
        # The alert every log pipeline can page on, once per run.
        for record in records:
            if str(record.run_id) in raised:
                event(
                    log,
                    "run.dead",
                    logging.ERROR,
                    run_id=record.run_id,
                    job_id=record.job_id,
                    tenant=record.tenant,
                    attempts=record.attempts,
                    error=record.last_error,
                )

    def _publish(self, records: Sequence[RunDead]) -> list[RunDead]:
        tracker = DeliveryTracker(self.producer)
        for index, record in enumerate(records):
            tracker.produce(
                index,
                self.catalog.dead,
                str(record.run_id).encode(),
                RUN_DEAD.encode(record),
                RUN_DEAD.headers(),
            )
        acked, failed = tracker.wait(self.publish_timeout.total_seconds())
        for _index, reason in failed:
            event(log, "run.dead_publish_failed", logging.WARNING, error=reason)
        return [records[i] for i in sorted(acked)]
