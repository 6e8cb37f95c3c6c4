"""The reaper: expired leases -> retry with backoff or dead; dead runs -> dead topic + alert.

Leases are judged by the database clock (``lease_expires_at < now()``), the same clock that set
them, so a skewed reaper host cannot expire a healthy worker early. Ending an attempt is a fenced
update on the attempt's lease token: if the worker completed (or renewed) in the meantime, the
update matches nothing and the reaper leaves the run alone.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta

import httpx
from confluent_kafka import Producer

from duetime.bus.kafka import DeliveryTracker
from duetime.bus.records import RUN_DEAD
from duetime.bus.topics import TopicCatalog
from duetime.events import RunDead
from duetime.logs import event
from duetime.schedule import retry_delay
from duetime.store import Store

from .config import ReaperConfig

__all__ = ["ReapStats", "Reaper"]

log = logging.getLogger("duetime.reaper")


@dataclass(frozen=True)
class ReapStats:
    expired: int = 0
    retried: int = 0
    dead: int = 0
    dead_published: int = 0


class Reaper:
    def __init__(
        self,
        store: Store,
        producer: Producer,
        catalog: TopicCatalog,
        config: ReaperConfig | None = None,
    ) -> None:
        self.store = store
        self.producer = producer
        self.catalog = catalog
        self.config = config or ReaperConfig()

    def run_once(self) -> ReapStats:
        expired, retried, dead = self.expire_leases()
        published = self.publish_dead()
        return ReapStats(expired=expired, retried=retried, dead=dead, dead_published=published)

    def expire_leases(self) -> tuple[int, int, int]:
        retried = dead = 0
        with self.store.tx() as tx:
            leases = tx.runs_get_expired(self.config.batch_size)
            for lease in leases:
                error = f"lease expired (worker {lease.worker or 'unknown'})"
                if lease.attempt < lease.max_attempts:
                    state = "scheduled"
                    delay = retry_delay(lease.retry, str(lease.run_id), lease.attempt)
                    retried += 1
                else:
                    state, delay = "dead", timedelta(0)
                    dead += 1
                tx.runs_expire(lease, state, delay, error)
                event(
                    log,
                    "lease.expired",
                    logging.WARNING,
                    run_id=lease.run_id,
                    attempt=lease.attempt,
                    worker=lease.worker,
                    outcome=state,
                    retry_in_ms=int(delay / timedelta(milliseconds=1))
                    if state == "scheduled"
                    else None,
                )
        return len(leases), retried, dead

    def publish_dead(self) -> int:
        """Dead-topic record + alert for each new dead run; marked only once acknowledged."""
        with self.store.tx() as tx:
            rows = tx.runs_get_dead_unpublished(self.config.batch_size)
            if not rows:
                return 0
            tracker = DeliveryTracker(self.producer)
            records: dict[tuple[object, object], RunDead] = {}
            for row in rows:
                record = RunDead(
                    run_id=row.run_id,
                    job_id=row.job_id,
                    tenant=row.tenant,
                    scheduled_for=row.scheduled_for,
                    attempts=row.attempt,
                    dead_at=row.finished_at,
                    last_error=row.last_error,
                )
                key = (row.run_id, row.scheduled_for)
                records[key] = record
                tracker.produce(
                    key,
                    self.catalog.dead,
                    str(row.run_id).encode(),
                    RUN_DEAD.encode(record),
                    RUN_DEAD.headers(),
                )
            acked, failed = tracker.wait(self.config.publish_timeout.total_seconds())
            for key in acked:
                record = records[key]
                # The alert: an ERROR line every log pipeline can page on, and the webhook.
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
                self._webhook(record)
                tx.runs_mark_dead_published(record.run_id, record.scheduled_for)
        for _key, reason in failed:
            event(log, "run.dead_publish_failed", logging.WARNING, error=reason)
        return len(acked)

    def _webhook(self, record: RunDead) -> None:
        url = self.config.alert_webhook
        if not url:
            return
        body = {
            "event": "run.dead",
            "run_id": str(record.run_id),
            "job_id": record.job_id,
            "tenant": record.tenant,
            "scheduled_for": record.scheduled_for.isoformat(),
            "attempts": record.attempts,
            "last_error": record.last_error,
        }
        try:
            httpx.post(
                url,
                content=json.dumps(body),
                headers={"Content-Type": "application/json"},
                timeout=self.config.alert_timeout.total_seconds(),
            )
        except httpx.HTTPError as exc:
            # The dead topic and the log line already carry the alert; a webhook outage must
            # not block reaping.
            event(log, "alert.webhook_failed", logging.WARNING, error=exc)
