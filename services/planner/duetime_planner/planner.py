"""The planner: due scan -> run rows -> outbox publish to the time-bucketed topics.

``Planner.run_once(now)`` does one round and returns what it did, so tests call it directly; the
service loop in ``service.py`` repeats it. ``now`` is the planner's monotonic clock (injected): it
paces the probes and the sweeper and decides whether the shard lease still holds. Every instant
written to the database comes from the database clock (``now()``), the same clock leases and due
times use, so a skewed planner host changes nothing.

Shards: without an owner (``ownership=None``) the planner scans every configured shard and
competes for due rows with FOR UPDATE SKIP LOCKED. With one (etcd mode) it plans only the shards
its lease holds, and every planning transaction is fenced in PostgreSQL by their tokens
(sql/shards.sql): the database refuses the writes of a planner whose shard has a newer owner.

Work is per batch, never per job or run: one scan, one insert of every run, one advance of every
job, one mark of every published run per batch of ``batch_size``; the schedule search runs once
per (spec, next_run_at) group (``planning.plan_jobs``). The lookahead grows when a spike is
coming (``planning.lookahead_for``), so a midnight of 100k runs is out well before it is due.
Far-future jobs are cold (kept out of the due index); before planning, the cold tier's loader
(``cold.py``) makes the coming hour's buckets hot. docs/planner.md has the design notes,
including the sweeper's rule and the cold tier.

Several PostgreSQL clusters (docs/clusters.md): a ``Planner`` plans one cluster, its ``store``,
and is configured with that cluster's shards (``clusters.py`` builds one per cluster). The target
limits and the due-load forecast belong to no shard and live in the home cluster: a planner of
another cluster is given the home cluster's store as ``home`` and reads and adds to the forecast
in a short transaction there.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

from duetime.bus.kafka import DeliveryTracker
from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_headers import RoutingHeaders, routing_headers
from duetime.bus.run_template import RunTemplate
from duetime.bus.topics import TopicCatalog
from duetime.capacity import WindowedRun, epoch_second, place
from duetime.collector import collector_paused
from duetime.errors import InvalidInput, StoreError
from duetime.flow import TargetLimit
from duetime.logs import event
from duetime.model import HttpTarget
from duetime.planning import (
    JobPlan,
    PlannedRun,
    PlanningRate,
    lookahead_for,
    plan_jobs_capped,
)
from duetime.schedule import ScheduleCache
from duetime.store import NewRun, OccurrenceGap, flow
from duetime.store.rows import DueJob, DueJobReader, OutboxRun

from .cold import ColdLoader
from .config import PlannerConfig
from .ports import PlannerStore, PlannerTx, RecordProducer, ShardOwner

__all__ = ["DueCounts", "PlanStats", "Planner"]

log = logging.getLogger("duetime.planner")

# The count of the jobs due ahead (Planner.refresh_lookahead): every this many seconds while it is
# cheap, otherwise after this many times its own duration (at most 1/20 of the planner's time).
_PROBE_EVERY_S = 1.0
_PROBE_SHARE = 20.0
# A publication (run_publications) its planner has not settled this long after the publish
# timeout is taken for abandoned: its planner died, or lost the database, while it waited for the
# broker. Any planner's outbox then unmarks its runs; a live but late planner only causes copies,
# which the dispatcher drops.
PUBLICATION_GRACE = timedelta(seconds=5)
# A histogram of the jobs due ahead: (bucket end, jobs due in the bucket), in time order.
DueCounts = list[tuple[datetime, int]]


@dataclass(frozen=True)
class PlanStats:
    jobs_planned: int = 0
    runs_created: int = 0
    runs_published: int = 0
    publish_failures: int = 0
    runs_swept: int = 0
    # etcd mode: shards a planning transaction found claimed by a newer owner (refused by the
    # fence), and job advances the fence refused inside a transaction.
    shards_refused: int = 0
    writes_fenced: int = 0
    # The cold tier's loader (cold.py): buckets made hot, and the jobs they held.
    cold_buckets_loaded: int = 0
    cold_jobs_loaded: int = 0

    def __add__(self, other: PlanStats) -> PlanStats:
        return PlanStats(
            self.jobs_planned + other.jobs_planned,
            self.runs_created + other.runs_created,
            self.runs_published + other.runs_published,
            self.publish_failures + other.publish_failures,
            self.runs_swept + other.runs_swept,
            self.shards_refused + other.shards_refused,
            self.writes_fenced + other.writes_fenced,
            self.cold_buckets_loaded + other.cold_buckets_loaded,
            self.cold_jobs_loaded + other.cold_jobs_loaded,
        )


@dataclass(frozen=True)
class _RoundShards:
    """The shards one round plans: every configured one (``tokens`` None, SKIP LOCKED mode), or
    those the lease holds with their fencing tokens (etcd mode)."""

    shards: tuple[int, ...]
    tokens: dict[int, int] | None


class _MissingPartitions(Exception):
    """Planned runs fall on days without a runs partition: create them outside the planning
    transaction (DDL there would hold a lock on ``runs`` while the batch is written)."""

    def __init__(self, days: set[date]) -> None:
        super().__init__(sorted(days))
        self.days = days


def _records_of(job: DueJob) -> tuple[RunTemplate, str, tuple[str, bytes], tuple[str, bytes]]:
    """What every record of ``job`` shares: the template of its value, its target kind and its
    routing headers. Made once per definition and kept with it (``JobShape.memo``): a job due
    every second is published in every batch."""
    made = job.shape.memo.get(job.job_id)  # a definition is one job's (DueJobReader)
    if made is None:
        template = RunTemplate(
            job_id=job.job_id,
            tenant=job.tenant,
            max_attempts=job.max_attempts,
            target_service=job.target_service,
            target=job.target,
            lease=job.lease,
            heartbeat_interval=job.heartbeat_interval,
            retry=job.retry,
        )
        kind = "http" if isinstance(job.target, HttpTarget) else "kafka"
        target, tenant = RoutingHeaders.job_headers(job.target_service, job.tenant)
        made = job.shape.memo[job.job_id] = (template, kind, target, tenant)
    return cast(tuple[RunTemplate, str, tuple[str, bytes], tuple[str, bytes]], made)


def _gap(job: DueJob, skipped: tuple[datetime, datetime]) -> OccurrenceGap:
    """The ledger's record of the missed occurrences ``job``'s catch-up policy left out."""
    reason = "max_catch_up" if job.catch_up == "all" else "catch_up"
    return OccurrenceGap(job.job_id, *skipped, reason, job.catch_up, job.shard_id)


def _utc_day(instant: datetime) -> date:
    return instant.astimezone(UTC).date()


class Planner:
    def __init__(
        self,
        store: PlannerStore,
        producer: RecordProducer,
        catalog: TopicCatalog,
        config: PlannerConfig | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        ownership: ShardOwner | None = None,
        member: str = "planner",
        home: PlannerStore | None = None,
        due_ahead: Callable[[DueCounts], DueCounts] | None = None,
        rate: PlanningRate | None = None,
    ) -> None:
        self.store = store
        # The home cluster's store when it is not ``store`` (several clusters): target limits
        # and the forecast are read and written there.
        self.home = home
        self._home_down = False
        self.producer = producer
        self.catalog = catalog
        self.config = config or PlannerConfig()
        self.cache = ScheduleCache()
        self.reader = DueJobReader()  # each job's definition parsed once while it stays
        self._monotonic = monotonic
        self.ownership = ownership
        self.member = member
        # shard -> the token this planner last claimed it with in the fence (etcd mode)
        self._claimed: dict[int, int] = {}
        self._pending_claims: frozenset[int] = frozenset()
        self._last_refused: frozenset[int] = frozenset()
        self._round = _RoundShards(self.config.shards, None)
        self._partitions: set[date] = set()
        # Days before this are never remembered as having a partition: the archive drops the
        # partitions of old days (docs/runs.md, "Retention and archive"), so a catch-up into
        # one ensures its partition again, in a short transaction of its own.
        self._remember_from: date | None = None
        self._last_sweep: float | None = None
        self._next_probe: float | None = None
        self.lookahead = self.config.lookahead
        # Several clusters planned by one process: the jobs due ahead on all of them (given this
        # cluster's, returns every cluster's latest), and the process's one planning rate.
        self._due_ahead = due_ahead
        self._scan_limit = self.config.batch_size
        self.rate = rate or PlanningRate(self.config.planning_rate, min_jobs=self.config.batch_size)
        self._limits: dict[str, TargetLimit] = {}
        self._rates_read_at: float | None = None
        self._rate_cache: dict[str, float] = {}
        self._no_rate: set[str] = set()
        self.cold = ColdLoader(store, self.config, member)
        # The last batch's publication, settling on its own thread (_settle_later).
        self._settler: ThreadPoolExecutor | None = None
        self._settling: Future[PlanStats] | None = None

    def run_once(self, now: float | None = None) -> PlanStats:
        """Plan every due job of this round's shards, publish every unpublished run (in
        batches), sweep when due. ``now``: the monotonic instant (default: the injected clock)."""
        started = self._monotonic() if now is None else now
        self._round = self._round_shards(started)
        stats = PlanStats()
        if self._round.shards:
            # The coming hour's jobs enter the due index before the scan looks for them.
            load = self.cold.maybe_load(started, self._round.shards, self._round.tokens)
            stats = PlanStats(
                shards_refused=load.shards_refused,
                cold_buckets_loaded=load.buckets,
                cold_jobs_loaded=load.jobs,
            )
            self.refresh_lookahead(now=started)
            while True:
                # A batch's objects all die with it: no collection inside (duetime/collector.py).
                with collector_paused():
                    round_stats, full = self.plan_batch()
                stats += round_stats
                if not full or round_stats.shards_refused or not self._still_owned():
                    break
        # The last batch's publication (also one left by a round that raised), settled before
        # the outbox flushes the producer.
        stats += self.settled()
        while True:
            with collector_paused():
                round_stats, full = self.publish_batch()
            stats += round_stats
            if not full or round_stats.runs_published == 0:
                break
        self.rate.observe(stats.jobs_planned, self._monotonic() - started)
        return stats + self.maybe_sweep(now=started)

    def _round_shards(self, now: float) -> _RoundShards:
        """SKIP LOCKED mode: every configured shard. etcd mode: the shards the lease holds at
        ``now``, claimed in the fence first where this planner has not claimed them yet."""
        if self.ownership is None:
            return _RoundShards(self.config.shards, None)
        configured = set(self.config.shards)
        tokens = {s: t for s, t in self.ownership.current(now).items() if s in configured}
        self._claimed = {s: t for s, t in self._claimed.items() if tokens.get(s) == t}
        unclaimed = {s: t for s, t in tokens.items() if s not in self._claimed}
        if unclaimed:
            with self.store.tx() as tx:
                claimed = tx.shards_claim(self.member, unclaimed)
            self._claimed.update({s: unclaimed[s] for s in claimed})
            pending = frozenset(unclaimed) - claimed
            # Once per change, not every round: a shard whose stored token is higher stays
            # pending until this planner's lease view catches up (or forever after an etcd
            # whose revisions restarted: docs/failover.md).
            if claimed or pending != self._pending_claims:
                event(
                    log,
                    "shards.claimed",
                    logging.INFO if not pending else logging.WARNING,
                    member=self.member,
                    count=len(claimed),
                    pending=len(pending),
                )
            self._pending_claims = pending
        # A shard not claimed now (another planner's transaction holds its row, or its stored
        # token is higher) is still offered to the fence, which decides.
        return _RoundShards(tuple(sorted(tokens)), tokens)

    def _still_owned(self) -> bool:
        """Before the next batch of a long round (a spike): keep only the shards the lease still
        holds with the same token; ``False`` once none is left (the lease may have lapsed)."""
        tokens = self._round.tokens
        if self.ownership is None or tokens is None:
            return True
        current = self.ownership.current(self._monotonic())
        kept = {s: t for s, t in tokens.items() if current.get(s) == t}
        if len(kept) != len(tokens):
            self._round = _RoundShards(tuple(sorted(kept)), kept)
        return bool(kept)

    def ensure_partitions(self, today: date) -> None:
        self._remember_from = today - timedelta(days=1)
        self._partitions = {d for d in self._partitions if d >= self._remember_from}
        self._ensure_days(
            {today + timedelta(days=o) for o in range(-1, self.config.partitions_ahead_days + 1)}
        )

    def _ensure_days(self, days: Iterable[date]) -> None:
        missing = sorted(set(days) - self._partitions)
        if not missing:
            return
        with self.store.tx() as tx:
            for day in missing:
                tx.runs_ensure_partition(day)
        start = self._remember_from
        self._partitions.update(d for d in missing if start is None or d >= start)

    def refresh_lookahead(self, *, force: bool = False, now: float | None = None) -> timedelta:
        """Re-count the jobs due ahead and size the lookahead.

        The count is repeated every second while it is cheap, so that a spike applied shortly
        before it is due is noticed within a second; one that takes long (a million jobs due
        ahead) runs at most 1/20 of the time, and every ``probe_interval`` at the least often.
        """
        cfg = self.config
        clock = self._monotonic() if now is None else now
        if not force and self._next_probe is not None and clock < self._next_probe:
            return self.lookahead
        if cfg.max_lookahead == cfg.lookahead:
            self._next_probe = clock + cfg.probe_interval.total_seconds()
            return self.lookahead
        started = self._monotonic()
        with self.store.tx() as tx:
            db_now = tx.db_now()
            counts = tx.jobs_due_histogram(
                self._round.shards, db_now + cfg.max_lookahead, cfg.probe_bucket, cfg.probe_cap
            )
        took = self._monotonic() - started
        self._next_probe = clock + min(
            cfg.probe_interval.total_seconds(), max(_PROBE_EVERY_S, took * _PROBE_SHARE)
        )
        if self._due_ahead is not None:
            counts = self._due_ahead(counts)
        lookahead = lookahead_for(
            now=db_now,
            base=cfg.lookahead,
            maximum=cfg.max_lookahead,
            jobs_per_second=self.rate.jobs_per_second,
            due_counts=counts,
        )
        if lookahead != self.lookahead:
            event(
                log,
                "planner.lookahead",
                lookahead_s=round(lookahead.total_seconds(), 1),
                jobs_ahead=sum(n for _end, n in counts),
                jobs_per_s=round(self.rate.jobs_per_second),
            )
        self.lookahead = lookahead
        return lookahead

    def plan_batch(self) -> tuple[PlanStats, bool]:
        try:
            return self._plan_batch()
        except _MissingPartitions as missing:
            self._ensure_days(missing.days)
            return self._plan_batch(ensured=missing.days)

    def _plan_batch(self, ensured: set[date] | None = None) -> tuple[PlanStats, bool]:
        cfg = self.config
        tokens = self._round.tokens
        refused = 0
        with self.store.tx() as tx:
            if tokens is None:
                now = tx.db_now()
                shards: Sequence[int] = self._round.shards
            else:
                # etcd mode: the fence first. The shards still ours are locked against a new
                # owner's claim until this transaction ends; the writes below carry the same
                # tokens, so the database refuses them for a shard claimed since.
                now = tx.planner_tx_guard(cfg.fenced_idle_timeout)
                fence = tx.shards_fence(self.member, tokens)
                # A shard the fence neither holds nor refuses has no row with this token (its
                # row was removed): claim it again next round.
                for shard in set(tokens) - fence.held - fence.refused:
                    self._claimed.pop(shard, None)
                tokens = {s: tokens[s] for s in fence.held}
                shards = sorted(fence.held)
                refused = len(fence.refused)
                # Every refusal is counted on its row; the log says when the set changes (a
                # stale view lasts until the lease thread notices, usually a round or two).
                if fence.refused and fence.refused != self._last_refused:
                    event(
                        log,
                        "shards.fenced",
                        logging.WARNING,
                        member=self.member,
                        refused=refused,
                        shards=",".join(map(str, sorted(fence.refused)[:8])),
                    )
                self._last_refused = fence.refused
            lookahead = self.lookahead
            scan_limit = self._scan_limit
            due = (
                tx.jobs_get_due_batch(shards, now + lookahead, scan_limit, self.reader)
                if shards
                else []
            )
            scanned = len(due)
            # Jobs due within the lookahead are planned `refill` beyond it (PlannerConfig).
            plan_until = lookahead + cfg.refill
            capped, cut = plan_jobs_capped(
                due,
                now=now,
                lookahead=plan_until,
                cache=self.cache,
                grace=cfg.on_time_grace,
                max_runs=cfg.batch_runs,
                # Whole jobs may be left for the next batch when none of them is due within
                # the lookahead's first half (planning.plan_jobs_capped).
                whole_jobs_from=now + lookahead / 2,
            )
            # Jobs left out whole are not planned now: their rows stay due for the next batch,
            # which scans about as many jobs as fitted in this one.
            kept = [(j, p) for j, p in zip(due, capped, strict=True) if p is not None]
            self._scan_limit = self._next_scan_limit(scan_limit, len(due), len(kept))
            due = [j for j, _p in kept]
            plans = [p for _j, p in kept if p is not None]
            placed = self._place(tx, now, due, plans)
            new_runs: list[NewRun] = []
            publish_until = now + plan_until
            planned: list[tuple[DueJob, tuple[PlannedRun, ...]]] = []
            # (job_id, next_run_at, last scheduled_for): written in one statement, not per job.
            advances: list[tuple[str, datetime | None, datetime | None]] = []
            gaps: list[OccurrenceGap] = []  # the occurrence ledger: what catch-up left out
            for job, plan in zip(due, plans, strict=True):
                if isinstance(plan, InvalidInput):
                    # The stored schedule no longer compiles (e.g. a zone removed from tzdata):
                    # stop scheduling it rather than failing the whole batch.
                    event(log, "job.unschedulable", logging.ERROR, job_id=job.job_id, error=plan)
                    advances.append((job.job_id, None, None))
                    continue
                if placed:
                    runs = tuple(
                        replace(r, due_at=placed[r.run_id]) if r.run_id in placed else r
                        for r in plan.runs
                    )
                    plan = replace(plan, runs=runs)
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
                            shard_id=job.shard_id,
                            # Published right after the commit (_publish_planned).
                            published=run.due_at <= publish_until,
                        )
                    )
                if plan.runs:
                    planned.append((job, plan.runs))
                last = plan.runs[-1].scheduled_for if plan.runs else None
                advances.append((job.job_id, plan.next_run_at, last))
                if plan.skipped is not None:
                    gaps.append(_gap(job, plan.skipped))
            days = (
                {_utc_day(r.scheduled_for) for r in new_runs}
                - self._partitions
                - (ensured or set())
            )
            if days:
                raise _MissingPartitions(days)
            created = tx.runs_insert_publishing(new_runs, tokens, self.member)
            inserted = created.inserted
            advanced = tx.jobs_advance_many(advances, tokens)
            tx.occurrence_gaps_insert(gaps, tokens)
        fenced = len(advances) - advanced if tokens is not None else 0
        if fenced:
            event(log, "planner.writes_fenced", logging.WARNING, member=self.member, jobs=fenced)
        if due:
            event(
                log,
                "runs.planned",
                jobs=len(due),
                runs=len(new_runs),
                inserted=len(inserted),
                lookahead_s=round(lookahead.total_seconds(), 1),
            )
        published = self._publish_planned(
            planned, inserted, now, publish_until, created.publication_id
        )
        stats = PlanStats(
            jobs_planned=len(due),
            runs_created=len(new_runs),
            shards_refused=refused,
            writes_fenced=fenced,
        )
        # A cut batch left runs of its jobs within the lookahead for the next one.
        return stats + published, scanned == scan_limit or cut

    def _next_scan_limit(self, limit: int, scanned: int, kept: int) -> int:
        """Jobs the next due scan reads: as many as this batch kept when it left whole jobs
        out (plus a quarter, in case the next ones have fewer runs), else back up towards
        ``batch_size``: a row read and locked but left out costs a lock for nothing."""
        if kept < scanned:
            return max(1, min(self.config.batch_size, kept + kept // 4 + 1))
        return min(self.config.batch_size, limit * 2)

    @contextmanager
    def _home_tx(self, tx: PlannerTx) -> Iterator[PlannerTx]:
        """The transaction for the tables of no shard (target limits, the forecast): the
        planning transaction ``tx`` itself on the home cluster, else a short one of the home
        cluster's own. That one commits before the planning transaction: if the latter then
        fails, the forecast counts runs that were not created, and placement is a little more
        careful than it needs to be until those seconds pass (they are pruned)."""
        if self.home is None:
            yield tx
            return
        with self.home.tx() as home_tx:
            yield home_tx

    def _rates(self, tx: PlannerTx, now: datetime) -> dict[str, float]:
        """The rate limit of each target that has one (own or default), re-read every
        ``probe_interval``; the forecast's past seconds are pruned at the same time. With the
        home cluster away (another cluster's planner), the limits last read stay."""
        clock = self._monotonic()
        if (
            self._rates_read_at is None
            or clock - self._rates_read_at >= self.config.probe_interval.total_seconds()
        ):
            try:
                with self._home_tx(tx) as home_tx:
                    limits = home_tx.targets_limits()
                    home_tx.target_forecast_prune(epoch_second(now) - 60)
            except StoreError as exc:
                self._home_unreachable(exc)  # raised again when this is the home cluster
                self._rates_read_at = clock
                return self._rate_cache
            self._home_reached()
            self._limits = limits
            self._rates_read_at = clock
            self._rate_cache.clear()
            self._no_rate.clear()
        return self._rate_cache

    def _home_unreachable(self, exc: StoreError) -> None:
        """The home cluster failed a planner of another cluster: plan on without placing runs
        in their windows (the dispatcher still enforces every rate), rather than stop."""
        if self.home is None:
            raise exc
        if not self._home_down:
            event(log, "planner.home_unavailable", logging.WARNING, error=exc)
        self._home_down = True

    def _home_reached(self) -> None:
        if self._home_down:
            event(log, "planner.home_available")
        self._home_down = False

    def _rate_of(self, target_service: str) -> float | None:
        cache = self._rate_cache
        if target_service not in cache and target_service not in self._no_rate:
            rate = flow.effective(self._limits, target_service).rate
            if rate is None:
                self._no_rate.add(target_service)
                return None
            cache[target_service] = rate
        return cache.get(target_service)

    def _place(
        self,
        tx: PlannerTx,
        now: datetime,
        due: Sequence[DueJob],
        plans: Sequence[JobPlan | InvalidInput],
    ) -> dict[uuid.UUID, datetime]:
        """Capacity-aware windows (``duetime.capacity``): for targets with a rate limit, put
        each windowed run in the first second of its window the target's forecast has room
        in, and add every run of such a target to the forecast. Nothing to do (no query) when
        no planned job has a rate-limited target."""
        self._rates(tx, now)
        if self._rates_read_at is not None and not self._limits:
            return {}
        if len(self._no_rate) > 100_000:  # targets come and go: do not grow without bound
            self._no_rate.clear()
        windowed: list[WindowedRun] = []
        for job, plan in zip(due, plans, strict=True):
            if isinstance(plan, InvalidInput) or not plan.runs:
                continue
            if self._rate_of(job.target_service) is None:
                continue
            runs = plan.runs
            for index, run in enumerate(runs):
                following = runs[index + 1].scheduled_for if index + 1 < len(runs) else None
                following = following or plan.next_run_at
                window = job.window
                if following is not None:
                    window = min(window, following - run.scheduled_for)
                windowed.append(
                    WindowedRun(
                        run.run_id, job.target_service, run.scheduled_for, run.due_at, window
                    )
                )
        if not windowed:
            return {}
        names = sorted({w.target_service for w in windowed})
        first = min(epoch_second(w.scheduled_for) for w in windowed)
        last = max(epoch_second(w.scheduled_for + w.window) for w in windowed)
        try:
            with self._home_tx(tx) as home_tx:
                load = home_tx.target_forecast_read(names, first, last)
                before = dict(load)
                placed = place(windowed, load, self._rate_cache)
                home_tx.target_forecast_add({k: n - before.get(k, 0) for k, n in load.items()})
        except StoreError as exc:
            self._home_unreachable(exc)
            return {}
        self._home_reached()
        return placed

    def _publish_planned(
        self,
        planned: Sequence[tuple[DueJob, tuple[PlannedRun, ...]]],
        inserted: set[uuid.UUID],
        now: datetime,
        horizon: datetime,
        publication: int | None,
    ) -> PlanStats:
        """Publish the runs a planning round just created, from what it has in memory.

        The outbox read (``publish_batch``) would fetch the same rows back with their jobs and
        build each record from scratch; here each job's record bytes are encoded once
        (``RunTemplate``) and only run id, instants and attempt are added per run.

        The round inserted these runs already marked published, with one ``publication`` row
        holding their keys: the mark is provisional until it is settled. Once the broker has
        answered (or the wait ended), the runs it did not acknowledge are unmarked, for the
        outbox to publish again, and the row is deleted: one statement, where marking every
        acknowledged run was an update per run. If this planner dies first, any planner's
        ``publish_batch`` recovers the row once it is older than the publish timeout allows.
        What is due beyond the horizon (window jitter) or not created by this round was
        inserted unmarked and is left to ``publish_batch``.

        The wait for the broker's answer and the settling run on the settling thread while the
        next batch reads, plans and writes (:meth:`_settle_later`). Returns the figures of the
        batch settled before this one (this one's come with the next call, or
        :meth:`settled`).
        """
        # The batch before this one is settled before this one produces: its wait (a flush)
        # must not wait for these records too.
        before = self.settled()
        # What the round inserted marked (new, due within the horizon), each job's runs picked
        # once: produced below, and all unmarked again if producing fails part-way.
        publish = [
            (job, picked)
            for job, runs in planned
            if (picked := [r for r in runs if r.run_id in inserted and r.due_at <= horizon])
        ]
        if not publish and publication is None:  # an idle round: nothing to produce or settle
            return before
        tracker = DeliveryTracker(self.producer)  # type: ignore[arg-type]
        headers = RoutingHeaders(now, RUN_EVENTS.headers())
        missed_before = now - self.config.on_time_grace
        marked = [(run.run_id, run.scheduled_for) for _job, runs in publish for run in runs]
        try:
            for job, runs in publish:
                template, kind, target, tenant = _records_of(job)
                for run in runs:
                    run_id = str(run.run_id)
                    tracker.produce(
                        (run.run_id, run.scheduled_for),
                        self.catalog.tier_for(run.due_at - now),
                        run_id.encode("ascii"),
                        template.encode(run_id, run.scheduled_for, run.due_at, 1),
                        headers.for_run(
                            run_id,
                            1,
                            run.due_at,
                            kind,
                            target=target,
                            tenant=tenant,
                            catch_up=run.scheduled_for < missed_before,
                        ),
                    )
        except BaseException:
            # What was produced may still arrive, but no answer is awaited: every run goes back
            # to the outbox (a copy that does arrive is dropped by the dispatcher).
            self._settle(tracker, marked, publication, wait=False)
            raise
        self._settle_later(tracker, marked, publication)
        return before

    def _settle_later(
        self,
        tracker: DeliveryTracker,
        marked: list[tuple[uuid.UUID, datetime]],
        publication: int | None,
    ) -> None:
        """Wait for the broker's answers and settle the publication on the settling thread.

        A batch of 10,000 runs waits ~0.1 s for its last acknowledgements under a steady load,
        a tenth of the batch; the next batch's database work fills that wait. At most one batch
        is unsettled at a time (``_publish_planned`` settles the one before it first), and
        :meth:`run_once` settles the last one before it returns."""
        if self._settler is None:
            self._settler = ThreadPoolExecutor(1, thread_name_prefix="planner-settle")
        self._settling = self._settler.submit(self._settle, tracker, marked, publication)

    def settled(self) -> PlanStats:
        """Wait for the batch being settled, if any; its figures. Raises what settling raised."""
        settling, self._settling = self._settling, None
        return PlanStats() if settling is None else settling.result()

    def _settle(
        self,
        tracker: DeliveryTracker,
        marked: list[tuple[uuid.UUID, datetime]],
        publication: int | None,
        *,
        wait: bool = True,
    ) -> PlanStats:
        acked: Sequence[tuple[uuid.UUID, datetime]] = ()
        failed: Sequence[tuple[Any, str]] = ()
        try:
            if wait and tracker.produced:
                acked, failed = tracker.wait(self.config.publish_timeout.total_seconds())
        finally:
            # Also when waiting raised: what was not acknowledged goes back to the outbox.
            if publication is not None:
                confirmed = set(acked)
                unconfirmed = [k for k in marked if k not in confirmed]
                with self.store.tx() as tx:
                    tx.publication_settle(publication, unconfirmed)
        if not tracker.produced:
            return PlanStats()
        self._log_publish(len(acked), failed, 0)
        return PlanStats(runs_published=len(acked), publish_failures=len(failed))

    def close(self) -> None:
        """Settle the last batch (if a round was cut short) and stop the settling thread."""
        try:
            self.settled()
        finally:
            if self._settler is not None:
                self._settler.shutdown(wait=True)
                self._settler = None

    def publish_batch(self) -> tuple[PlanStats, bool]:
        """The outbox: publish scheduled runs, mark published only what the broker acknowledged.

        Every record carries the schema header and the routing headers (run id, attempt, due
        instant, target kind, and this round's database clock), so a router need not decode it.
        """
        cfg = self.config
        with self.store.tx() as tx:
            # Publications whose planner never settled them: their runs join this outbox read.
            recovered = tx.publications_recover(cfg.publish_timeout + PUBLICATION_GRACE)
            if recovered:
                event(log, "runs.publications_recovered", logging.WARNING, runs=recovered)
            now = tx.db_now()
            rows = tx.runs_get_unpublished(now + self.lookahead, cfg.batch_size)
            orphans = [(r.run_id, r.scheduled_for) for r in rows if r.target is None]
            cancelled = tx.runs_cancel_orphans(orphans)
            tracker = DeliveryTracker(self.producer)  # type: ignore[arg-type]
            schema_headers = RUN_EVENTS.headers()
            for row in rows:
                if row.target is not None:
                    self._produce(tracker, row, now, schema_headers)
            acked, failed = tracker.wait(cfg.publish_timeout.total_seconds())
            tx.runs_mark_published_many(acked)
        self._log_publish(len(acked), failed, cancelled)
        stats = PlanStats(runs_published=len(acked), publish_failures=len(failed))
        return stats, len(rows) == cfg.batch_size

    def _produce(
        self,
        tracker: DeliveryTracker,
        row: OutboxRun,
        now: datetime,
        schema_headers: list[tuple[str, str | bytes | None]],
    ) -> None:
        assert row.target is not None
        attempt = row.attempt + 1
        run = row.event(attempt)
        kind = "http" if isinstance(row.target, HttpTarget) else "kafka"
        tracker.produce(
            (row.run_id, row.scheduled_for),
            self.catalog.tier_for(row.due_at - now),
            str(row.run_id).encode(),
            RUN_EVENTS.encode(run),
            schema_headers
            + routing_headers(
                row.run_id,
                attempt,
                row.due_at,
                kind,
                now,
                target_service=row.target_service,
                tenant=row.tenant,
                # A first attempt published after its time: missed, so drained (a retry is not).
                catch_up=attempt == 1 and row.scheduled_for < now - self.config.on_time_grace,
            ),
        )

    def _log_publish(
        self, acked: int, failed: Iterable[tuple[object, str]], cancelled: int
    ) -> None:
        reasons = Counter(reason for _token, reason in failed)
        for reason, count in reasons.items():
            event(log, "runs.publish_failed", logging.WARNING, count=count, error=reason)
        if cancelled:
            event(log, "runs.cancelled", count=cancelled, reason="job deleted")
        if acked:
            event(log, "runs.published", count=acked)

    def maybe_sweep(self, now: float | None = None) -> PlanStats:
        clock = self._monotonic() if now is None else now
        if (
            self._last_sweep is not None
            and clock - self._last_sweep < self.config.sweep_interval.total_seconds()
        ):
            return PlanStats()
        self._last_sweep = clock
        return self.sweep()

    def sweep(self) -> PlanStats:
        """One sweeper round: make lost runs publishable again (the next publish sends them)."""
        cfg = self.config
        with self.store.tx() as tx:
            swept = tx.runs_sweep_lost(
                grace=cfg.sweep_grace,
                max_grace=cfg.sweep_max_grace,
                margin=cfg.sweep_margin,
                limit=cfg.sweep_limit,
                scan_limit=cfg.sweep_limit * 10,
            )
        if swept:
            reasons = Counter(reason for _run_id, reason in swept)
            event(log, "runs.swept", logging.WARNING, count=len(swept), **reasons)
        return PlanStats(runs_swept=len(swept))
