"""The faust glue: due topics in, the holding in the middle, ``runs.ready`` out.

Two coroutines share one :class:`~duetime_dispatcher.holding.Holding` on the event loop:

* the *intake* agent takes up to ``max_batch`` raw records per step (``noack_take``: faust acks
  nothing by itself), decodes them and hands them to the holding;
* the *release* task sleeps until the wheel's next due instant (at most ``max_sleep``, and woken
  early by the intake), takes what is due, publishes it, and once the broker has acknowledged
  a release, acks the source records that are now a settled prefix of their partition.

faust commits the acked offsets every ``commit_interval``. It only ever sees contiguous acks
(:mod:`duetime_dispatcher.ledger`), so a run held for an hour pins its partition's committed
offset below it for that hour, and a crash replays it. On a rebalance, faust revokes every
partition (eager protocol) and seeks the new assignment back to the committed offsets, so the
holding drops what it held for those partitions and reads it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import faust

from duetime.bus.records import RUN_EVENTS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import CodecError
from duetime.logs import event as log_event
from duetime.model import RunEvent

from .config import DispatcherConfig, faust_settings
from .holding import Holding, Outcome, Source
from .publisher import ReadyPublisher

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


def _ms(value: timedelta) -> float:
    return round(value / timedelta(milliseconds=1), 3)


class Dispatcher:
    """One dispatcher process: a faust app plus the loop that releases runs on time.

    Args:
        settings: where the broker is and the topic prefix.
        config: batching, sleeping and de-duplication knobs.
        clock: the wall clock (runs are due at wall-clock instants).
    """

    def __init__(
        self,
        settings: Settings,
        config: DispatcherConfig | None = None,
        *,
        clock: Clock = _utc_now,
    ) -> None:
        self.settings = settings
        self.config = config or DispatcherConfig()
        self.catalog = TopicCatalog(settings.topic_prefix)
        self.group_id = f"{settings.topic_prefix}dispatcher"
        self._clock = clock
        self.holding: Holding[Any] = Holding(
            clock(),
            dedup_window=self.config.dedup_window,
            max_hold=self.config.max_hold,
            retry_interval=self.config.retry_interval,
            tick=self.config.tick,
        )
        self.stale = 0  # events skipped because a rebalance happened since they were read
        self.publisher: ReadyPublisher[Any] = ReadyPublisher.from_settings(
            settings, self.catalog.ready, self.config.publish_timeout.total_seconds()
        )
        self.app = faust.App(self.group_id, **faust_settings(settings, self.config, self.catalog))
        self.source = self.app.topic(
            *self.catalog.due_topics,
            key_serializer="raw",
            value_serializer="raw",
            allow_empty=True,
        )
        self.app.agent(self.source, name=f"{self.group_id}.intake", concurrency=1)(self._intake)
        self.app.task(self._release_loop)
        # mode's SignalHandlerT (VarArg/NamedArg) accepts no callable under current mypy, not even
        # its own documented handler shape; the receivers below follow that shape.
        self.app.on_partitions_revoked.connect(self._on_revoked)  # type: ignore[arg-type]
        self.app.on_partitions_assigned.connect(self._on_assigned)  # type: ignore[arg-type]
        self.app.on_before_shutdown.connect(self._on_shutdown)  # type: ignore[arg-type]
        self._wake: asyncio.Event | None = None
        self._log_thread = ThreadPoolExecutor(1, thread_name_prefix="dispatcher-log")
        self._closing = False

    # -- intake --------------------------------------------------------------------------------

    async def _intake(self, stream: Any) -> None:
        within = self.config.batch_within.total_seconds()
        async for events in stream.noack_take(self.config.max_batch, within=within):
            self.take(events)

    def take(self, events: Sequence[Any]) -> None:
        """Decode a batch of faust events and hand them to the holding."""
        app, holding = self.app, self.holding
        generation = app.consumer_generation_id
        active = app.flow_control.is_active()
        now = self._clock()
        for item in events:
            message = item.message
            if not active or message.generation_id != generation:
                # Read before a rebalance that has since revoked its partition: the partition was
                # sought back to its committed offset, and the record comes again. faust's own
                # stream makes the same check; events already in the take buffer escape it.
                self.stale += 1
                continue
            source = Source(message.topic, message.partition, message.offset)
            try:
                run: RunEvent | None = RUN_EVENTS.decode(item.value, _headers(message.headers))
            except Exception as exc:
                # CodecError is what the codec raises; anything else is still a poison record,
                # and crashing on it would crash again on every restart that reads it.
                run = None
                log_event(
                    log,
                    "run.undecodable",
                    logging.WARNING,
                    topic=source.topic,
                    partition=source.partition,
                    offset=source.offset,
                    reason=str(exc) if isinstance(exc, CodecError) else repr(exc),
                )
            outcome = holding.receive(source, run, item, now, item.value)
            if run is not None and outcome in _OUTCOME_EVENTS:
                name, level = _OUTCOME_EVENTS[outcome]
                if log.isEnabledFor(level):  # run.held is per run and DEBUG: skip the fields
                    log_event(
                        log,
                        name,
                        level,
                        run_id=run.run_id,
                        attempt=run.attempt,
                        due_at=run.due_at.isoformat(),
                        topic=source.topic,
                        partition=source.partition,
                        offset=source.offset,
                    )
        self._ack(holding.ackable())
        if self._wake is not None:
            self._wake.set()

    # -- release -------------------------------------------------------------------------------

    async def _release_loop(self) -> None:
        self._wake = wake = asyncio.Event()
        log_event(
            log,
            "dispatcher.started",
            group=self.group_id,
            topics=",".join(self.catalog.due_topics),
            ready=self.catalog.ready,
        )
        stats_every = self.config.stats_interval
        next_stats = self._clock() + stats_every
        try:
            while not self.app.should_stop:
                await self.release_due()
                now = self._clock()
                if now >= next_stats:
                    self.log_stats("dispatcher.stats")
                    next_stats = now + stats_every
                wake.clear()
                delay = self._sleep_for(now)
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), delay)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug here would leave runs held forever behind a live consumer; better to crash
            # and let the process supervisor restart us (nothing is lost: nothing was acked).
            log.exception("dispatcher.crashed")
            await self.app.crash(exc)

    async def release_due(self) -> int:
        """Publish every run due now; ack what the broker acknowledged. Returns runs released."""
        holding = self.holding
        releases = holding.due(self._clock())
        if not releases and not holding.in_flight:
            return 0
        outcomes = await self.publisher.publish(releases)
        acknowledged_at = self._clock()
        lines: list[tuple[RunEvent, float]] = []
        for release, error in outcomes:
            run = release.run
            if error is None:
                lines.append((run, _ms(holding.delivered(release, acknowledged_at))))
            else:
                holding.failed(release, acknowledged_at)
                log_event(
                    log,
                    "run.release_failed",
                    logging.WARNING,
                    run_id=run.run_id,
                    attempt=run.attempt,
                    reason=error,
                    retry_in_s=self.config.retry_interval.total_seconds(),
                )
        self._ack(holding.ackable())
        if lines and log.isEnabledFor(logging.INFO):
            if self._closing:
                _log_released(lines)
            else:
                # One line per run is ~25 us of formatting: 2.5 s for a spike of 100k runs due
                # in the same second. A logging thread keeps that off the next release's path.
                self._log_thread.submit(_log_released, lines)
        return len(lines)

    def _sleep_for(self, now: datetime) -> float:
        cap = self.config.max_sleep.total_seconds()
        next_due = self.holding.next_due()
        if next_due is None:
            return cap
        return min(cap, max(0.0, (next_due - now).total_seconds()))

    # -- acks, rebalances, shutdown ------------------------------------------------------------

    @staticmethod
    def _ack(tokens: Iterable[Any]) -> None:
        for token in tokens:
            token.ack()

    # mode calls signal receivers as ``receiver(sender, *args, signal=..., **kwargs)``.

    async def _on_revoked(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        revoked: Iterable[Any] = args[0]
        partitions = {(tp.topic, tp.partition) for tp in revoked}
        dropped = self.holding.revoke(partitions)
        log_event(log, "partitions.revoked", count=len(partitions), dropped_runs=dropped)

    async def _on_assigned(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        assigned: Iterable[Any] = args[0]
        log_event(log, "partitions.assigned", count=len(set(assigned)))

    async def _on_shutdown(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        self._closing = True
        await self.publisher.close()
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
            release_failures=counters.release_failures,
            dropped_on_revoke=counters.dropped_on_revoke,
            lateness_max_ms=round(counters.lateness_max_ms, 3),
            lateness_mean_ms=round(counters.lateness_mean_ms, 3),
        )


def _log_released(lines: Sequence[tuple[RunEvent, float]]) -> None:
    for run, lateness_ms in lines:
        log_event(
            log,
            "run.released",
            run_id=run.run_id,
            attempt=run.attempt,
            tenant=run.tenant,
            target_service=run.target_service,
            lateness_ms=lateness_ms,
        )


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    if not raw:
        return []
    if isinstance(raw, Mapping):
        return list(raw.items())
    return [(str(key), value) for key, value in raw]
