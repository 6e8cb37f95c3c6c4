"""The reaper: expired leases -> retry with backoff or dead; dead runs -> alert + dead topic.

Leases are judged by the database clock (``lease_expires_at < now()``), the same clock that set
them, so a skewed reaper host cannot expire a healthy worker early. Ending an attempt is a fenced
update on the attempt's lease token: if the worker completed (or renewed) in the meantime, the
update matches nothing and the reaper leaves the run alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from confluent_kafka import Producer

from duetime.bus.topics import TopicCatalog
from duetime.logs import event
from duetime.schedule import retry_delay
from duetime.store import Store

from .config import ReaperConfig
from .dead_runs import DeadRunPublisher

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
        self.dead_runs = DeadRunPublisher(
            store,
            producer,
            catalog,
            batch_size=self.config.batch_size,
            publish_timeout=self.config.publish_timeout,
        )

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
        """Raise each new dead run's alert and publish it on the dead topic (``dead_runs``)."""
        return self.dead_runs.run_once()
