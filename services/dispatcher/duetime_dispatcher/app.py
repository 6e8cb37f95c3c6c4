"""The faust glue: due topics in, the holding in the middle, ``runs.ready`` out.

faust runs the process (its worker: signals, the event loop, the service's tasks); the due
topics are read by a confluent-kafka consumer in batches (:mod:`duetime_dispatcher.intake`), not
by a faust agent, whose event per record cost a third of the dispatcher's time per run. Two
coroutines share one :class:`~duetime_dispatcher.holding.Holding` on the event loop:

* the *intake* task takes up to ``max_batch`` records per step from the consumer's fetched
  queue, routes them from their headers (:mod:`duetime_dispatcher.routing`) and hands them to
  the holding; at the cap on held runs it pauses its partitions
  (:mod:`duetime_dispatcher.backpressure`);
* the *release* task sleeps until the wheel's next due instant (at most ``max_sleep``, and woken
  early by the intake), takes what is due, publishes it, and once the broker has acknowledged
  a release, acks the source records that are now a settled prefix of their partition.

The intake commits the acked positions every ``commit_interval``. Acks are only ever contiguous
(:mod:`duetime_dispatcher.ledger`), so a run held for an hour pins its partition's committed
offset below it for that hour, and a crash replays it. On a rebalance the revoked partitions'
positions are committed and the holding drops what it held of them; their next owner reads it
again from there.

Due instants are on the planner's database clock. The dispatcher estimates its own clock's
offset from the send time the planner stamps on each record (:mod:`duetime.clock_offset`)
and judges every instant by ``local clock - correction``, so a skewed host neither fires early
nor late without saying so (``clock.skew``).

Runs for HTTP targets without limits are released ``claim_ahead`` (5 s) before they are due:
a worker claims each at once, with a lease that counts from the due instant, and starts it at
the due instant (docs/claim-ahead.md), so a midnight's database work is done before midnight.

Kafka-target runs take the fast path (:mod:`duetime_dispatcher.fast_path`): at the due instant
the dispatcher emits the job's own record onto the job's topic, and a third coroutine, the
*record* task, writes those successes to PostgreSQL in batches
(:mod:`duetime_dispatcher.recorder`); their source records are acked only after that write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import faust
from confluent_kafka import Message, Producer
from faust.app.base import BootStrategy
from prometheus_client import CollectorRegistry

from duetime.aio import wait_event
from duetime.bus.kafka import producer_config
from duetime.bus.run_headers import epoch_ms
from duetime.bus.topics import TopicCatalog
from duetime.clock_offset import ClockOffset
from duetime.collector import collector_paused
from duetime.config import Settings
from duetime.errors import CodecError, StoreError
from duetime.logs import event as log_event
from duetime.store.clusters import ClusterStores

from .backpressure import Gate, IntakeGate
from .config import DispatcherConfig, faust_settings
from .fast_path import EmissionPlanner
from .heap import Heap
from .holding import Holding, Outcome, Release, Source
from .intake import IntakeConsumer
from .ledger import Partition
from .metrics import lateness_histogram
from .publisher import Outcomes, ReadyPublisher
from .recorder import DispatcherStore, EmittedRecorder, RunClusters
from .routing import Headers, Routed, route_record
from .throttle import Throttle

__all__ = ["Dispatcher"]

log = logging.getLogger("duetime.dispatcher")

# The log line for what the holding did with a decoded run (the undecodable ones log their reason).
_OUTCOME_EVENTS: dict[Outcome, tuple[str, int]] = {
    Outcome.HELD: ("run.held", logging.DEBUG),
    Outcome.TOO_FAR: ("run.too_far", logging.WARNING),
    Outcome.DUPLICATE: ("run.duplicate", logging.INFO),
}

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


_MS = timedelta(milliseconds=1)
_NO_LEAD = timedelta(0)
# The fast path's result records go out this many per record round, when the recorder says
# they may (recorder.EmittedRecorder.results_may_go).
_RESULTS_PER_ROUND = 5000
# At shutdown, after the publisher's close: how long the settling task may take to account
# for the answers that close served (its settle returns within a poll slice of the close).
_SETTLE_AT_CLOSE = 2.0
# How long the release loop pauses while librdkafka's queue is full (the settling task produces
# what it refused; rare: the queue holds 100,000 records).
_FULL_QUEUE_PAUSE = 0.01


@dataclass(frozen=True, slots=True)
class _Routed:
    """A batch of records as routed (None for a poison record), and when it was read."""

    records: list[tuple[Source, Routed | None]]
    read_at: datetime  # this host's clock


def _ms(value: timedelta) -> float:
    return round(value / _MS, 3)


class Dispatcher:
    """One dispatcher process: a faust app plus the loop that releases runs on time.

    Args:
        settings: where the broker is and the topic prefix.
        config: batching, sleeping and de-duplication knobs.
        clock: this host's wall clock; due instants are judged by it minus the estimated
            offset from the database clock.
        store: where the Kafka fast path records its successes and flow control keeps its
            tables; by default the stores of ``settings.clusters()``: the home cluster for flow
            control and the clock, each run's cluster for its row.
        registry: where the lateness histogram is registered (the service passes the process's
            registry; by default it is kept unregistered, for tests and embedding).
    """

    def __init__(
        self,
        settings: Settings,
        config: DispatcherConfig | None = None,
        *,
        clock: Clock = _utc_now,
        store: DispatcherStore | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.config = config or DispatcherConfig()
        self.heap = Heap()
        self.catalog = TopicCatalog(settings.topic_prefix)
        self.group_id = f"{settings.topic_prefix}dispatcher"
        self._clock = clock
        self.lateness = lateness_histogram(registry)
        config = self.config
        self.clock_offset = ClockOffset(
            window=config.clock_window, threshold=config.clock_threshold, warn_at=config.clock_warn
        )
        self.gate = IntakeGate(config.max_held, config.low_water, config.max_pause)
        self._paused = False  # whether the gate stopped the intake
        self._skew_logged = False
        self.holding: Holding[Source] = Holding(
            clock(),
            dedup_window=self.config.dedup_window,
            max_hold=self.config.max_hold,
            retry_interval=self.config.retry_interval,
            tick=self.config.tick,
            prepare=self.config.prepare_ahead,
        )
        self.stale = 0  # records of a partition no longer assigned (none expected; counted)
        self.publisher: ReadyPublisher[Source] = ReadyPublisher.from_settings(
            settings, self.catalog.ready, self.config.publish_timeout.total_seconds()
        )
        self._clusters: ClusterStores | None = None
        clusters: RunClusters | None = None
        if store is None:
            self._clusters = ClusterStores(
                settings.clusters(), pool_size=2, application_name="duetime-dispatcher"
            )
            store = self._clusters.home
            clusters = self._clusters if len(self._clusters) > 1 else None
        self.recorder: EmittedRecorder[Source] = EmittedRecorder(
            store,
            Producer(producer_config(settings, **{"linger.ms": 20})),
            self.catalog.results,
            f"dispatcher:{socket.gethostname()}-{os.getpid()}",
            clusters=clusters,
        )
        self.emit_skipped = 0  # Kafka targets sent to runs.ready instead (refused, undecodable)
        self.throttle: Throttle[Source] = Throttle()
        self._next_grant = clock()
        self._last_release = clock()
        # Releases left for the settling task: the queue had no room for them at send.
        self._unsent: list[Release[Source]] = []
        self._settling: asyncio.Task[None] | None = None  # the broker's answers (_settle)
        self._first_round: tuple[datetime, timedelta] | None = None  # for runs.released
        self._reported_waiting = False
        self.app = _ServiceApp(self.group_id, **faust_settings(settings, self.config, self.catalog))
        self.intake = IntakeConsumer(
            settings,
            self.group_id,
            self.catalog.due_topics,
            on_assigned=self._on_assigned,
            on_revoked=self._on_revoked,
        )
        self.app.task(self._intake_loop)
        self.app.task(self._release_loop)
        self.app.task(self._record_loop)
        # mode's SignalHandlerT (VarArg/NamedArg) accepts no callable under current mypy, not even
        # its own documented handler shape; the receiver below follows that shape.
        self.app.on_before_shutdown.connect(self._on_shutdown)  # type: ignore[arg-type]
        self._wake: asyncio.Event | None = None
        self._joined = asyncio.Event()  # set at the first assignment (possibly of nothing)
        self._emissions = EmissionPlanner(self.settings.topic_prefix)
        self._log_thread = ThreadPoolExecutor(1, thread_name_prefix="dispatcher-log")
        self._closing = False

    # -- intake --------------------------------------------------------------------------------

    async def _intake_loop(self) -> None:
        """Take what the consumer has fetched, a batch at a time; commit acked positions.

        ``poll`` never blocks, so between batches the release task gets the loop; an empty poll
        sleeps ``idle_poll``. A paused intake (the held cap) keeps polling: that serves
        rebalances and keeps the group membership alive, and paused partitions hand out
        nothing."""
        intake = self.intake
        intake.subscribe()
        max_batch = self.config.max_batch
        idle = self.config.idle_poll.total_seconds()
        commit_every = self.config.commit_interval
        next_commit = self._clock() + commit_every
        try:
            while not self.app.should_stop and not self._closing:
                messages = intake.poll(max_batch)
                if messages:
                    batch = self.route(messages)
                    # Nothing polls while this waits: no rebalance can move the partitions.
                    handled = await self.already_handled(batch)
                    if self._closing:
                        return  # not held, not acked: read again by the next owner
                    self.hold(batch, handled)
                    # Held until due: out of the young collections' way (heap.py says why).
                    self.heap.freeze()
                    await asyncio.sleep(0)
                else:
                    await asyncio.sleep(idle)
                if self._closing:
                    return  # the shutdown hook commits and closes the consumer
                if self._clock() >= next_commit:
                    intake.commit()
                    next_commit = self._clock() + commit_every
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("dispatcher.intake_crashed")
            await self.app.crash(exc)

    def route(self, messages: Sequence[Message]) -> _Routed:
        """Route a batch of records (a poison record routes to None), and when it was read."""
        assigned = self.intake.assigned
        local_now = self._clock()
        routed_records: list[tuple[Source, Routed | None]] = []
        for message in messages:
            source = Source(message.topic(), message.partition(), message.offset())  # type: ignore[arg-type]
            if source.tp not in assigned:
                # Revoked while the batch was taken (a rebalance callback served by the same
                # poll): its next owner reads it from the committed position.
                self.stale += 1
                continue
            try:
                # librdkafka hands header values over as bytes (or None), never str.
                headers = cast(Headers, message.headers() or [])
                routed: Routed | None = route_record(message.value(), headers)
                if routed is not None and routed.target_kind == "kafka":
                    routed = self._plan_emission(routed, source)
            except Exception as exc:
                # CodecError is what the codec raises; anything else is still a poison record,
                # and crashing on it would crash again on every restart that reads it.
                routed = None
                log_event(
                    log,
                    "run.undecodable",
                    logging.WARNING,
                    topic=source.topic,
                    partition=source.partition,
                    offset=source.offset,
                    reason=str(exc) if isinstance(exc, CodecError) else repr(exc),
                )
            routed_records.append((source, routed))
        return _Routed(routed_records, local_now)

    def hold(self, batch: _Routed, handled: Collection[tuple[uuid.UUID, int]] = ()) -> None:
        """Hand a routed batch to the holding, in the order it was read. ``handled``: the
        (run_id, attempt) whose runs are already past them (acked, not held)."""
        holding = self.holding
        received_ms = epoch_ms(batch.read_at)
        now = self._on_db_clock(batch.read_at)
        min_sent_delta: int | None = None
        debug = log.isEnabledFor(logging.DEBUG)
        claim_ahead, limited = self.config.claim_ahead, self.throttle.limited
        for source, routed in batch.records:
            lead = _NO_LEAD
            if (
                claim_ahead
                and routed is not None
                and routed.target_kind == "http"
                and not routed.catch_up
                and not limited(routed.target_service)
            ):
                lead = claim_ahead  # a worker claims it ahead (docs/claim-ahead.md)
            done = (
                bool(handled) and routed is not None and (routed.run_id, routed.attempt) in handled
            )
            outcome = holding.receive(source, routed, source, now, lead, done)
            if routed is None:
                continue
            if routed.sent_at_ms is not None:
                delta = received_ms - routed.sent_at_ms
                if min_sent_delta is None or delta < min_sent_delta:
                    min_sent_delta = delta
            if outcome in _OUTCOME_EVENTS:
                name, level = _OUTCOME_EVENTS[outcome]
                if level > logging.DEBUG or debug:  # run.held is per run: skip the fields
                    log_event(
                        log,
                        name,
                        level,
                        run_id=routed.run_id,
                        attempt=routed.attempt,
                        due_at=routed.due_at.isoformat(),
                        topic=source.topic,
                        partition=source.partition,
                        offset=source.offset,
                    )
        if min_sent_delta is not None:
            # The batch's smallest difference is the only one that can lower the minimum.
            self.clock_offset.observe(received_ms, received_ms - min_sent_delta)
            self._check_skew()
        self._ack(holding.ackable())
        self._apply_gate(now)
        if self._wake is not None:
            self._wake.set()

    async def already_handled(self, batch: _Routed) -> set[tuple[uuid.UUID, int]]:
        """Of a batch's Kafka-target runs read ``recheck_late`` or more after their due instant,
        those whose run is already past the record's attempt (the database says so): a record
        read again after a restart, whose run this dispatcher or another emitted and recorded
        before its offset was committed. Emitting it again would be a duplicate at the job's
        topic. Runs read on time cost nothing (none are asked about). If the database cannot
        answer, none is dropped: at-least-once, as before."""
        late = self.config.recheck_late
        if late is None:
            return set()
        before = self._on_db_clock(batch.read_at) - late
        runs = [
            routed.emission
            for _source, routed in batch.records
            if routed is not None and routed.emission is not None and routed.due_at <= before
        ]
        if not runs:
            return set()
        try:
            handled = await self.recorder.handled(runs)
        except StoreError as exc:
            log_event(log, "runs.recheck_failed", logging.WARNING, count=len(runs), reason=str(exc))
            return set()
        if handled:
            log_event(log, "runs.already_handled", count=len(handled), asked=len(runs))
        return handled

    def _plan_emission(self, routed: Routed, source: Source) -> Routed:
        try:
            planned, skipped = self._emissions.plan(routed)
        except Exception as exc:
            # A bug in planning must not make a routable run poison: a worker can still run it.
            planned, skipped = routed, repr(exc)
        routed = planned
        if skipped is not None:
            # Not lost: the record goes to runs.ready, where a worker ends the run (as dead,
            # with this reason, if the topic is refused).
            self.emit_skipped += 1
            log_event(
                log,
                "run.emit_skipped",
                run_id=routed.run_id,
                attempt=routed.attempt,
                reason=skipped,
                topic=source.topic,
                partition=source.partition,
                offset=source.offset,
            )
        return routed

    def db_now(self) -> datetime:
        """Now on the database clock, as well as this process can tell (never ahead of it)."""
        return self._on_db_clock(self._clock())

    def _on_db_clock(self, local: datetime) -> datetime:
        """``local`` (this host's clock) on the database clock, as well as this process can tell."""
        return local - self.clock_offset.correction_ms * _MS

    # -- back-pressure -------------------------------------------------------------------------

    def _apply_gate(self, now: datetime) -> None:
        """Pause or resume the intake's partitions when the gate changes.

        librdkafka drops a paused partition's fetched records and fetches again from the
        position after the last record it handed out, so a pause skips nothing; the intake
        keeps polling while paused, which serves rebalances and heartbeats the group.
        """
        paused = self.gate.update(self._held(), now) is Gate.PAUSED
        if paused == self._paused:
            return
        self._paused = paused
        if paused:
            self.intake.pause()
        else:
            self.intake.resume()
        log_event(
            log,
            "intake.paused" if paused else "intake.resumed",
            held=self._held(),
            max_held=self.gate.max_held,
            resume_below=self.gate.resume_below,
        )

    @property
    def intake_paused(self) -> bool:
        """Whether the intake is paused at the held cap (the gate)."""
        return self._paused

    def _held(self) -> int:
        """Runs in memory: on the wheel, and due but waiting for a throttled target's grant."""
        return self.holding.held + self.throttle.waiting

    def _shed_if_starving(self, now: datetime) -> None:
        count = self.gate.to_shed(self._held(), now)
        if not count:
            return
        # Runs waiting at a throttled target go first: they are the backlog that starves the
        # others, and the sweeper publishes them again once they are plausibly lost.
        for release in self.throttle.shed(count):
            self.holding.abandon(release)
            count -= 1
        shed = self.holding.shed(count) if count > 0 else []
        if shed:
            log_event(
                log,
                "runs.shed",
                logging.WARNING,
                count=len(shed),
                due_from=shed[-1].due_at.isoformat(),
                due_to=shed[0].due_at.isoformat(),
                paused_s=self.config.max_pause.total_seconds(),
                hint="held runs stayed at max_held: add dispatchers or raise max_held",
            )
        self._ack(self.holding.ackable())
        self._apply_gate(now)

    # -- clock ---------------------------------------------------------------------------------

    def _check_skew(self) -> None:
        skewed = self.clock_offset.skewed
        if skewed and not self._skew_logged:
            self._log_skew()
        self._skew_logged = skewed

    def _log_skew(self) -> None:
        offset = self.clock_offset
        log_event(
            log,
            "clock.skew",
            logging.WARNING,
            offset_ms=offset.estimate_ms,
            correction_ms=offset.correction_ms,
            meaning="this host's clock minus the database clock (an upper bound)",
        )

    # -- release -------------------------------------------------------------------------------

    async def _release_loop(self) -> None:
        self._wake = wake = asyncio.Event()
        # Started means a member of the group with its partitions (as faust's start meant):
        # until the first assignment nothing can be held, and callers wait on this line.
        await self._joined.wait()
        log_event(
            log,
            "dispatcher.started",
            group=self.group_id,
            topics=",".join(self.catalog.due_topics),
            ready=self.catalog.ready,
            max_held=self.config.max_held,
        )
        stats_every = self.config.stats_interval
        next_stats = self._clock() + stats_every
        stage_ahead = self.config.stage_ahead
        await self.refresh_flow()  # limits known before the first release
        try:
            while not self.app.should_stop:
                await self.release_due()
                local_now = self._clock()
                now = self.db_now()
                self._apply_gate(now)
                self._shed_if_starving(now)
                if local_now >= next_stats:
                    self.clock_offset.expire(epoch_ms(local_now))
                    self.log_stats("dispatcher.stats")
                    if self.clock_offset.skewed:
                        self._log_skew()
                    next_stats = local_now + stats_every
                self._maybe_collect(now)
                if stage_ahead:
                    self._stage(now, stage_ahead)
                wake.clear()
                delay = self._sleep_for(now)
                if delay > 0:
                    await wait_event(wake, delay)
                else:
                    # A round need not await anything (its answers are the settling task's):
                    # with runs due back to back, the loop must still let the intake and the
                    # settling task run between rounds.
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug here would leave runs held forever behind a live consumer; better to crash
            # and let the process supervisor restart us (nothing is lost: nothing was acked).
            log.exception("dispatcher.crashed")
            await self.app.crash(exc)

    async def release_due(self) -> int:
        """Publish every run due now; returns runs released. The broker's answers are awaited
        by the settling task (:meth:`_settle`), so the next round need not wait for them.

        The garbage collector waits while a round runs: a spike allocates per run, and a full
        collection over everything held (millions of objects at 100k held runs) would pause the
        release itself, at the due instant, for 100 ms or more. The round makes no cycles; the
        collector catches up after it."""
        with collector_paused():
            return await self._release_due()

    async def _release_due(self) -> int:
        holding, publisher = self.holding, self.publisher
        if self._unsent:
            # librdkafka's queue was full: nothing more leaves the wheel until the settling
            # task has produced what it refused, so in-flight runs stay bounded by that queue.
            await asyncio.sleep(_FULL_QUEUE_PAUSE)
            return 0
        taken_at = self.db_now()
        due = holding.take_due(taken_at)
        releases = self.throttle.admit(due)
        # At the due instant, the produce calls first; the bookkeeping after them, before the
        # first await (the intake must find these runs in flight, see Holding.take_due).
        self._unsent += publisher.send(releases)
        holding.track(due)
        if self.throttle.waiting and self._clock() >= self._next_grant:
            granted = await self.grant()
            self._unsent += publisher.send(granted)
            releases = [*releases, *granted]
        if releases:
            self._last_release = self._clock()
            if self._first_round is None:
                # How late the round started (the first release's due instant to taking it
                # off the wheel), for the next runs.released line.
                self._first_round = (taken_at, taken_at - releases[0].routed.due_at)
        if (publisher.outstanding or self._unsent) and (
            self._settling is None or self._settling.done()
        ):
            self._settling = asyncio.create_task(self._settle())
        return len(releases)

    async def _settle(self) -> None:
        """Take the broker's answers while rounds go on being released, until every record
        produced has its answer; ack what they settle. One at a time (see release_due)."""
        publisher = self.publisher
        try:
            while True:
                unsent, self._unsent = self._unsent, []
                outcomes = await publisher.settle(unsent)
                with collector_paused():
                    self._account(outcomes)
                # On the loop, with no settle under way: the count is exact, and a round
                # released from here on starts a new task once this one is done.
                if self._closing or (not publisher.outstanding and not self._unsent):
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Without this task, releases would stay in flight for ever behind a live consumer;
            # better to crash and let the process supervisor restart us (nothing was acked).
            log.exception("dispatcher.crashed")
            await self.app.crash(exc)

    def _account(self, outcomes: Outcomes[Source]) -> None:
        """What the broker said of each release: delivered (acked, or for the fast path handed
        to the recorder), refused (retried, or rerouted to runs.ready)."""
        if not outcomes:
            return
        holding = self.holding
        acknowledged_at = self.db_now()
        lines: list[tuple[Routed, float]] = []
        for release, error in outcomes:
            routed = release.routed
            emission = routed.emission
            if emission is not None:
                if error is None:
                    # On the job's topic: acked once the run row says so (the record task).
                    lateness = holding.delivered(release, acknowledged_at, settle=False)
                    self.recorder.add(release, emission, acknowledged_at)
                    lines.append((routed, _ms(lateness)))
                else:
                    # The job's topic refused it: a worker takes it from runs.ready, with
                    # retries and backoff as for any run.
                    holding.reroute(release, replace(routed, emission=None))
                    log_event(
                        log,
                        "run.emit_failed",
                        logging.WARNING,
                        run_id=routed.run_id,
                        attempt=routed.attempt,
                        topic=emission.topic,
                        reason=error,
                        then="runs.ready",
                    )
            elif error is None:
                lines.append((routed, _ms(holding.delivered(release, acknowledged_at))))
            else:
                holding.failed(release, acknowledged_at)
                log_event(
                    log,
                    "run.release_failed",
                    logging.WARNING,
                    run_id=routed.run_id,
                    attempt=routed.attempt,
                    reason=error,
                    retry_in_s=self.config.retry_interval.total_seconds(),
                )
        self._ack(holding.ackable())
        if len(lines) < len(outcomes) and self._wake is not None:
            self._wake.set()  # refused ones wait on the wheel again: the loop's sleep is stale
        if lines:
            taken_at, start_lag = self._first_round or (acknowledged_at, timedelta(0))
            self._first_round = None
            self._log_released(lines, start_lag, acknowledged_at - taken_at)

    def _stage(self, now: datetime, ahead: timedelta) -> None:
        """Take the runs due within ``ahead`` off the wheel now, so that at their instant only
        the produce calls are left (:meth:`Holding.stage`). Like a release round, it makes no
        cycles: the collector waits, and what it made is frozen with the rest held."""
        with collector_paused():
            staged = self.holding.stage(now, now + ahead)
        if staged:
            self.heap.freeze()

    async def grant(self) -> list[Release[Source]]:
        """Ask PostgreSQL which runs waiting at throttled targets may go now (one statement
        round for every waiting target); on a database error nothing goes this time."""
        self._next_grant = self._clock() + self.config.throttle_interval
        requests = self.throttle.requests()
        if not requests:
            return []
        try:
            counts = await self.recorder.on_db(lambda store: store.targets_grant(requests))
        except StoreError as exc:
            log_event(log, "throttle.grant_failed", logging.WARNING, reason=str(exc))
            counts = {}
        return self.throttle.granted(counts, self.db_now())

    async def refresh_flow(self) -> None:
        """Re-read the targets' limits and tenants' weights; report what waits per target."""
        try:
            limits, weights = await self.recorder.on_db(lambda store: store.flow_settings())
        except StoreError as exc:
            log_event(log, "throttle.limits_failed", logging.WARNING, reason=str(exc))
            return
        self.throttle.set_limits(limits, weights)
        waiting = self.throttle.waiting_per_target()
        if waiting or self._reported_waiting:
            dispatcher = self.recorder.worker_id
            try:
                await self.recorder.on_db(
                    lambda store: store.targets_report_waiting(dispatcher, waiting)
                )
            except StoreError as exc:
                log_event(log, "throttle.report_failed", logging.WARNING, reason=str(exc))
                return
            self._reported_waiting = bool(waiting)

    async def _record_loop(self) -> None:
        """Write the fast path's successes every ``record_interval``, then ack their records;
        read the database clock every ``clock_probe_interval``."""
        interval = self.config.record_interval.total_seconds()
        retry = self.config.retry_interval.total_seconds()
        next_probe = next_limits = self._clock()
        while not self.app.should_stop and not self._closing:
            await asyncio.sleep(interval)
            if self._closing:  # the shutdown hook writes what is left, then closes the thread
                return
            if self._clock() >= next_probe:
                await self.probe_clock()
                next_probe = self._clock() + self.config.clock_probe_interval
            if self._clock() >= next_limits:
                await self.refresh_flow()
                next_limits = self._clock() + self.config.limits_interval
            if not await self.record_emitted():
                await asyncio.sleep(retry)
            if self.recorder.results_may_go(self._clock(), self._last_release):
                await self.recorder.publish_results(_RESULTS_PER_ROUND)

    async def probe_clock(self) -> None:
        """One clock sample straight from the database: ``clock_timestamp()``, then this host's
        clock once the answer is back. Like a record's send time, it bounds the offset from
        above, but with a round trip of a few ms instead of a record's transit through the
        broker and the intake's queues (seconds, when a burst is being read), so it keeps the
        estimate tight whatever the traffic."""

        def sample(store: DispatcherStore) -> tuple[int, int]:
            db_now = store.db_clock()
            return epoch_ms(self._clock()), epoch_ms(db_now)

        try:
            received_ms, sent_ms = await self.recorder.on_db(sample)
        except StoreError as exc:
            log_event(log, "clock.probe_failed", logging.WARNING, reason=str(exc))
            return
        self.clock_offset.observe(received_ms, sent_ms)
        self._check_skew()

    async def record_emitted(self) -> bool:
        """Flush the recorder and ack what it wrote. False if the database write failed."""
        if not self.recorder.pending:
            return True
        written: list[Release[Source]] = await self.recorder.flush()
        for release in written:
            self.holding.settle(release)
        self._ack(self.holding.ackable())
        return bool(written) or not self.recorder.pending

    def _log_released(
        self, lines: list[tuple[Routed, float]], start_lag: timedelta, publish: timedelta
    ) -> None:
        """One INFO line per release round; the per-run lines only at DEBUG."""
        lateness = [lateness_ms for _, lateness_ms in lines]
        self.lateness.observe_many(lateness, scale=1000.0)  # one sort per round, not per run
        log_event(
            log,
            "runs.released",
            count=len(lines),
            emitted=sum(1 for routed, _ in lines if routed.emission is not None),
            lateness_max_ms=max(lateness),
            lateness_mean_ms=round(sum(lateness) / len(lateness), 3),
            start_lag_ms=_ms(start_lag),
            publish_ms=_ms(publish),
        )
        if log.isEnabledFor(logging.DEBUG):
            if self._closing:
                _log_each_released(lines)
            else:
                # One line per run is ~25 us of formatting: 2.5 s for a spike of 100k runs due
                # in the same second. A logging thread keeps that off the next release's path.
                self._log_thread.submit(_log_each_released, lines)

    def _maybe_collect(self, now: datetime) -> None:
        """The garbage collector's full pass, when it is time (:mod:`duetime_dispatcher.heap`)."""
        next_due = self.holding.next_due()
        full = self.heap.maybe_collect(
            None if next_due is None else (next_due - now).total_seconds()
        )
        if full is not None:
            log_event(
                log,
                "dispatcher.gc",
                logging.WARNING if full.forced else logging.INFO,
                frozen=full.frozen,
                unreachable=full.unreachable,
                took_ms=round(full.took_s * 1000, 1),
                forced=full.forced,
            )

    def _sleep_for(self, now: datetime) -> float:
        cap = self.config.max_sleep.total_seconds()
        if self.throttle.waiting:
            cap = min(cap, self.config.throttle_interval.total_seconds())
        next_due = self.holding.next_due(self.config.stage_ahead)
        if next_due is None:
            return cap
        return min(cap, max(0.0, (next_due - now).total_seconds()))

    # -- acks, rebalances, shutdown ------------------------------------------------------------

    def _ack(self, tokens: Iterable[Source]) -> None:
        """Move each partition's commit position past its settled prefix (in offset order)."""
        ack = self.intake.ack
        for source in tokens:
            ack(source.tp, source.offset)

    # The intake's consumer calls these from its poll, on the event loop.

    def _on_revoked(self, partitions: list[Partition]) -> None:
        dropped = self.holding.revoke(partitions) + self.throttle.revoke(partitions)
        log_event(log, "partitions.revoked", count=len(partitions), dropped_runs=dropped)

    def _on_assigned(self, partitions: list[Partition]) -> None:
        log_event(log, "partitions.assigned", count=len(partitions))
        self._joined.set()

    async def _on_shutdown(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        # mode calls signal receivers as ``receiver(sender, *args, signal=..., **kwargs)``.
        self._closing = True
        await self.publisher.close()  # every record answered, or publish_timeout passed
        settling = self._settling
        if settling is not None and not settling.done():
            # Its last settle takes the answers the flush served (the fast path's successes
            # among them, for the recorder below); after the close it waits no longer.
            await asyncio.wait({settling}, timeout=_SETTLE_AT_CLOSE)
            settling.cancel()
        await self.record_emitted()
        self.intake.close()  # commits the acked positions, then leaves the group
        self.recorder.close(self.config.publish_timeout)
        if self._clusters is not None:
            self._clusters.close()
        self._log_thread.shutdown(wait=True)
        self.log_stats("dispatcher.stopped")

    def log_stats(self, name: str) -> None:
        holding, counters = self.holding, self.holding.counters
        log_event(
            log,
            name,
            held=holding.held,
            in_flight=holding.in_flight,
            unacked=holding.unacked,
            received=counters.received,
            released=counters.released,
            duplicates=counters.duplicates,
            undecodable=counters.undecodable,
            stale=self.stale,
            redelivered=counters.redelivered,
            too_far=counters.too_far,
            already_handled=counters.handled,
            release_failures=counters.release_failures,
            dropped_on_revoke=counters.dropped_on_revoke,
            shed=counters.shed,
            emitted_recorded=self.recorder.recorded,
            emitted_already_handled=self.recorder.already_handled,
            emit_rerouted=counters.rerouted,
            emit_skipped=self.emit_skipped,
            intake_paused=self._paused,
            throttled_now=self.throttle.waiting,
            throttled_total=self.throttle.throttled_total,
            lateness_max_ms=round(counters.lateness_max_ms, 3),
            lateness_mean_ms=round(counters.lateness_mean_ms, 3),
            clock_offset_ms=self.clock_offset.estimate_ms,
            clock_correction_ms=self.clock_offset.correction_ms,
        )


def _log_each_released(lines: Sequence[tuple[Routed, float]]) -> None:
    for routed, lateness_ms in lines:
        log_event(
            log,
            "run.released",
            logging.DEBUG,
            run_id=routed.run_id,
            attempt=routed.attempt,
            target_kind=routed.target_kind,
            lateness_ms=lateness_ms,
        )


class _Boot(BootStrategy):
    """faust without its Kafka clients: the intake has its own consumer and the publisher and
    recorder their own producers, so faust's would only join the group and hold connections."""

    enable_kafka = False


class _ServiceApp(faust.App):
    BootStrategy = _Boot
