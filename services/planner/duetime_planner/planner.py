"""The planner: due scan -> run rows -> outbox publish to the time-bucketed topics.

``Planner.run_once()`` does one round and returns what it did, so tests call it directly; the
service loop in ``service.py`` repeats it. All instants come from the database clock (``now()``),
the same clock leases and due times use, so a skewed planner host changes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from confluent_kafka import Producer

from duetime.bus.kafka import DeliveryTracker
from duetime.bus.records import RUN_EVENTS
from duetime.bus.topics import TopicCatalog
from duetime.errors import InvalidInput
from duetime.logs import event
from duetime.model import RunEvent
from duetime.planning import plan_job
from duetime.schedule import ScheduleCache
from duetime.store import NewRun, Store

from .config import PlannerConfig

__all__ = ["PlanStats", "Planner"]

log = logging.getLogger("duetime.planner")


@dataclass(frozen=True)
class PlanStats:
    jobs_planned: int = 0
    runs_created: int = 0
    runs_published: int = 0
    publish_failures: int = 0
    runs_swept: int = 0

    def __add__(self, other: PlanStats) -> PlanStats:
        return PlanStats(
            self.jobs_planned + other.jobs_planned,
            self.runs_created + other.runs_created,
            self.runs_published + other.runs_published,
            self.publish_failures + other.publish_failures,
            self.runs_swept + other.runs_swept,
        )


class Planner:
    def __init__(
        self,
        store: Store,
        producer: Producer,
        catalog: TopicCatalog,
        config: PlannerConfig | None = None,
    ) -> None:
        self.store = store
        self.producer = producer
        self.catalog = catalog
        self.config = config or PlannerConfig()
        self.cache = ScheduleCache()
        self._partitions: set[date] = set()
        self._last_sweep: float | None = None  # monotonic seconds

    def run_once(self) -> PlanStats:
        """Plan every due job, publish every unpublished run (in batches), sweep when due."""
        stats = PlanStats()
        while True:
            round_stats, full = self.plan_batch()
            stats += round_stats
            if not full:
                break
        while True:
            round_stats, full = self.publish_batch()
            stats += round_stats
            if not full or round_stats.runs_published == 0:
                break
        return stats + self.maybe_sweep()

    def ensure_partitions(self, today: date) -> None:
        with self.store.tx() as tx:
            for offset in range(-1, self.config.partitions_ahead_days + 1):
                day = today + timedelta(days=offset)
                if day not in self._partitions:
                    tx.runs_ensure_partition(day)
        self._partitions.update(
            today + timedelta(days=o) for o in range(-1, self.config.partitions_ahead_days + 1)
        )

    def plan_batch(self) -> tuple[PlanStats, bool]:
        cfg = self.config
        with self.store.tx() as tx:
            now = tx.db_now()
            due = tx.jobs_get_due(cfg.shards, now + cfg.lookahead, cfg.batch_size)
            new_runs: list[NewRun] = []
            # (job_id, next_run_at, last scheduled_for): written in one batch, not per job.
            advances: list[tuple[str, datetime | None, datetime | None]] = []
            for job in due:
                try:
                    plan = plan_job(
                        job_id=job.job_id,
                        spec=job.schedule,
                        window=job.window,
                        catch_up=job.catch_up,
                        max_catch_up=job.max_catch_up,
                        next_run_at=job.next_run_at,
                        now=now,
                        lookahead=cfg.lookahead,
                        cache=self.cache,
                        grace=cfg.on_time_grace,
                    )
                except InvalidInput as exc:
                    # The stored schedule no longer compiles (e.g. a zone removed from tzdata):
                    # stop scheduling it rather than failing the whole batch.
                    event(log, "job.unschedulable", logging.ERROR, job_id=job.job_id, error=exc)
                    advances.append((job.job_id, None, None))
                    continue
                for run in plan.runs:
                    new_runs.append(
                        NewRun(
                            run_id=run.run_id,
                            job_id=job.job_id,
                            tenant=job.tenant,
                            target_service=job.target_service,
                            scheduled_for=run.scheduled_for,
                            due_at=run.due_at,
                            max_attempts=job.max_attempts,
                        )
                    )
                last = plan.runs[-1].scheduled_for if plan.runs else None
                advances.append((job.job_id, plan.next_run_at, last))
            days = {r.scheduled_for.astimezone(UTC).date() for r in new_runs}
            for day in sorted(days - self._partitions):
                tx.runs_ensure_partition(day)
            tx.runs_insert(new_runs)
            tx.jobs_advance(advances)
        self._partitions.update(days)
        if new_runs:
            event(log, "runs.planned", jobs=len(due), runs=len(new_runs))
        return PlanStats(jobs_planned=len(due), runs_created=len(new_runs)), len(due) == (
            cfg.batch_size
        )

    def publish_batch(self) -> tuple[PlanStats, bool]:
        """The outbox: publish scheduled runs, mark published only what the broker acknowledged."""
        cfg = self.config
        with self.store.tx() as tx:
            now = tx.db_now()
            rows = tx.runs_get_unpublished(now + cfg.lookahead, cfg.batch_size)
            tracker = DeliveryTracker(self.producer)
            for row in rows:
                if row.target is None:
                    tx.runs_cancel_orphan(row.run_id, row.scheduled_for)
                    event(log, "run.cancelled", run_id=row.run_id, reason="job deleted")
                    continue
                run = RunEvent(
                    run_id=row.run_id,
                    job_id=row.job_id,
                    tenant=row.tenant,
                    scheduled_for=row.scheduled_for,
                    due_at=row.due_at,
                    attempt=row.attempt + 1,
                    max_attempts=row.max_attempts,
                    target_service=row.target_service,
                    target=row.target,
                    lease=row.lease,
                    heartbeat_interval=row.heartbeat_interval,
                    retry=row.retry,
                )
                tracker.produce(
                    (row.run_id, row.scheduled_for),
                    self.catalog.tier_for(row.due_at - now),
                    str(row.run_id).encode(),
                    RUN_EVENTS.encode(run),
                    RUN_EVENTS.headers(),
                )
            acked, failed = tracker.wait(cfg.publish_timeout.total_seconds())
            tx.runs_mark_published(acked)
        for _token, reason in failed:
            event(log, "run.publish_failed", logging.WARNING, error=reason)
        if acked:
            event(log, "runs.published", count=len(acked))
        return PlanStats(runs_published=len(acked), publish_failures=len(failed)), len(rows) == (
            cfg.batch_size
        )

    def maybe_sweep(self) -> PlanStats:
        now = time.monotonic()
        if (
            self._last_sweep is not None
            and now - self._last_sweep < self.config.sweep_interval.total_seconds()
        ):
            return PlanStats()
        self._last_sweep = now
        with self.store.tx() as tx:
            swept = tx.runs_sweep_unclaimed(self.config.sweep_grace)
        if swept:
            event(log, "runs.swept", logging.WARNING, count=swept)
        return PlanStats(runs_swept=swept)
