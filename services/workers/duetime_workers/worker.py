"""The worker service: wires the consumer thread, the attempt pipeline and the clients together.

Threads and the event loop divide the work by what blocks:

- the **event loop** runs attempts (HTTP calls, retries) concurrently, and the batchers that turn
  their claims and completions into one statement per batch, and the lease renewer;
- a **consumer thread** drives the runs.ready consumer (``ReadyConsumer``) and hands the records
  of each fetch to the loop in one ``call_soon_threadsafe``; a slot is taken per record and
  released when its attempt task ends, which is what bounds the work in flight. A run released
  ahead of its due instant gives its slot back at once and waits on ``max_ahead`` instead
  (docs/claim-ahead.md), so a spike's runs can all be claimed and waiting at the due instant;
- a **producer thread** serves librdkafka delivery callbacks (``AsyncProducer``);
- a **database pool** runs the blocking batch statements under deadlines (``BlockingCalls``).

Shutdown (SIGINT/SIGTERM, or ``request_stop()``): stop taking records at once, give in-flight
attempts ``shutdown_grace`` to finish, then hand the rest back (``AttemptRunner.hand_back``: their
executions are cancelled and one batched, fenced completion makes their runs due again at once,
so they are retried without waiting for their leases to lapse), commit, leave the group, flush
the producer. An attempt whose hand-back does not land is cancelled and left to the reaper. A
second signal, a second or more after the first, cancels in-flight attempts at once (their
leases then expire and the reaper retries them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import threading
import time
from collections import Counter

from confluent_kafka import Consumer

from duetime.bus.kafka import consumer_config, create_topics, make_producer
from duetime.bus.topics import TopicCatalog, TopicSpec
from duetime.config import Settings
from duetime.store.clusters import ClusterStores

from .announce import BusEvents
from .attempt import AttemptReport, AttemptRunner
from .blocking import BlockingCalls
from .config import WorkerConfig
from .consumer import Fetched, ReadyConsumer, Slots
from .http_target import HttpExecutor
from .kafka_target import KafkaExecutor
from .lanes import ClusterRunStores
from .logs import event
from .metrics import WorkerMetrics
from .offsets import OffsetTracker
from .producer import AsyncProducer
from .secret_store import SecretStore
from .targets import Targets
from .transport import make_http_client

__all__ = ["WorkerService"]

_CANCEL_WAIT = 5.0
_FLUSH_TIMEOUT = 5.0
_DB_POOL = 8
_STATS_INTERVAL = 10.0
_GAUGE_INTERVAL = 1.0
_REPEAT_WINDOW = 1.0


class WorkerService:
    """One worker process. ``await run()`` until stopped; returns the exit code."""

    def __init__(
        self, settings: Settings, config: WorkerConfig, metrics: WorkerMetrics | None = None
    ) -> None:
        self.settings = settings
        self.config = config
        self.metrics = metrics
        self.catalog = TopicCatalog(settings.topic_prefix)
        self.group_id = f"{settings.topic_prefix}{config.group_id}"
        self.stats: Counter[str] = Counter()  # attempt statuses, for tests and the stop line
        self.consuming = threading.Event()  # set once the consumer has partitions
        # Set when the stop is first requested: the entry point's stop deadline runs from here.
        self.stopping = threading.Event()
        self._slots = Slots(config.concurrency)
        self._ahead = 0  # runs claimed (or being claimed) ahead that hold no slot
        self._tracker = OffsetTracker()
        self._tasks: set[asyncio.Task[AttemptReport]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._failed = False
        self._stop_requested_at = 0.0

    def request_stop(self) -> None:
        """Ask the service to shut down; safe from any thread and from signal handlers."""
        loop, stop = self._loop, self._stop
        if loop is None or stop is None:
            return
        loop.call_soon_threadsafe(self._on_stop_request)

    def _on_stop_request(self) -> None:
        assert self._stop is not None
        now = time.monotonic()
        if self._stop.is_set():
            # A repeat within a second is the same request delivered twice (the process group
            # and a supervisor passing it on); only a deliberate second one forces the stop.
            if now - self._stop_requested_at < _REPEAT_WINDOW:
                return
            event("worker.force_stop", logging.WARNING, in_flight=len(self._tasks))
            for task in self._tasks:
                task.cancel()
        self._stop_requested_at = now
        self._stop.set()
        self.stopping.set()

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # First: a secrets directory that cannot be used stops the worker before it takes work.
        secrets = SecretStore(
            directory=self.config.secrets_dir,
            environ=os.environ,
            worker_id=self.config.worker_id,
            cache_ttl=self.config.secret_cache_ttl,
        )
        await asyncio.to_thread(create_topics, self.settings, self._topics())
        # A handful of statements in flight at a time (claims, completions, renewals), with room
        # for calls stuck on a dead connection until libpq's keepalives end them; per cluster.
        clusters = ClusterStores(
            self.settings.clusters(),
            pool_size=_DB_POOL,
            application_name=f"duetime-worker:{self.config.worker_id}"[:63],
        )
        producer = AsyncProducer(make_producer(self.settings))
        producer.start()
        calls = BlockingCalls(max_workers=_DB_POOL * 2 * len(clusters))
        client = make_http_client(
            allow_private=self.config.allow_private_targets,
            max_connections=self.config.concurrency,
        )
        runner = AttemptRunner(
            config=self.config,
            # One cluster: the plain Store, no routing at all.
            store=(
                clusters.stores[0]
                if len(clusters) == 1
                else ClusterRunStores(clusters.stores, clusters.shard_map.cluster_of_job)
            ),
            events=BusEvents(producer, self.catalog),
            targets=Targets(
                HttpExecutor(client, self.config.user_agent, secrets=secrets),
                KafkaExecutor(producer, self.settings.topic_prefix),
            ),
            calls=calls,
            stopping=self._stop,
            metrics=self.metrics,
        )
        consumer = ReadyConsumer(
            Consumer(consumer_config(self.settings, self.group_id)),
            self.catalog.ready,
            slots=self._slots,
            tracker=self._tracker,
            submit=lambda batch: self._submit(runner, batch),
            poll_timeout=self.config.poll_timeout.total_seconds(),
            assigned=self.consuming,
        )
        thread = threading.Thread(
            target=self._consume, args=(consumer,), name="duetime-consumer", daemon=True
        )
        self._install_signal_handlers()
        event(
            "worker.started",
            worker_id=self.config.worker_id,
            concurrency=self.config.concurrency,
            topic=self.catalog.ready,
            group=self.group_id,
            allow_private_targets=self.config.allow_private_targets,
        )
        runner.start()
        stats = asyncio.create_task(self._log_stats(runner))
        gauge = asyncio.create_task(self._sample_in_flight())
        thread.start()
        try:
            await self._stop.wait()
            await self._shutdown(consumer, runner)
        finally:
            stats.cancel()
            gauge.cancel()
            await runner.stop()
            consumer.stop_fetching.set()
            consumer.drained.set()
            await asyncio.to_thread(thread.join)
            await client.aclose()
            unsent = await asyncio.to_thread(producer.close, _FLUSH_TIMEOUT)
            calls.shutdown()
            clusters.close()
            event("worker.stopped", unsent_events=unsent, **dict(self.stats))
        return 1 if self._failed else 0

    def _topics(self) -> list[TopicSpec]:
        wanted = {self.catalog.ready, self.catalog.heartbeats, self.catalog.results}
        return [spec for spec in self.catalog.all() if spec.name in wanted]

    async def _shutdown(self, consumer: ReadyConsumer, runner: AttemptRunner) -> None:
        consumer.stop_fetching.set()
        event("worker.stopping", in_flight=len(self._tasks))
        if not self._tasks:
            return
        grace = self.config.shutdown_grace.total_seconds()
        _done, late = await asyncio.wait(set(self._tasks), timeout=grace)
        if not late:
            return
        event("worker.handing_back", count=len(late))
        runner.hand_back()
        # Cancelling the executions, then one completion statement (under its own deadline).
        handing = _CANCEL_WAIT + self.config.db_call_timeout.total_seconds()
        _done, stuck = await asyncio.wait(late, timeout=handing)
        for task in stuck:
            task.cancel()
        if stuck:
            event("worker.attempts_cancelled", logging.WARNING, count=len(stuck))
            await asyncio.wait(stuck, timeout=_CANCEL_WAIT)

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # embedded (tests): the owner calls request_stop()
        assert self._loop is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                self._loop.add_signal_handler(sig, self.request_stop)

    # consumer thread ----------------------------------------------------------------------
    def _consume(self, consumer: ReadyConsumer) -> None:
        try:
            consumer.run()
        except Exception as exc:  # the consumer cannot continue: stop the whole worker
            event("worker.consumer_failed", logging.ERROR, error=repr(exc))
            self._failed = True
            self.request_stop()

    def _submit(self, runner: AttemptRunner, batch: list[Fetched]) -> None:
        """Called on the consumer thread; starts the batch's attempts on the event loop."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._spawn, runner, batch)

    def _spawn(self, runner: AttemptRunner, batch: list[Fetched]) -> None:
        if self._stop is not None and self._stop.is_set():
            # Taken from the broker while the stop was being requested: leave them uncommitted
            # (they are re-delivered) rather than start work the shutdown will not wait for.
            for _ in batch:
                self._slots.release()
            return
        room = self.config.max_ahead - self._ahead
        for fetched in batch:
            ahead = room > 0 and runner.until_due(fetched.run) > 0
            if ahead:
                room -= 1
                self._ahead += 1
                self._slots.release()
            task = asyncio.create_task(
                runner.run(fetched.run, fetched.released_at, fetched.throttled_ms)
            )
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, fetched=fetched, ahead=ahead))

    async def _sample_in_flight(self) -> None:
        """The in-flight gauge, set every ``_GAUGE_INTERVAL`` (not as each attempt starts)."""
        if self.metrics is None:
            return
        while True:
            self.metrics.in_flight.set(len(self._tasks))
            await asyncio.sleep(_GAUGE_INTERVAL)

    async def _log_stats(self, runner: AttemptRunner) -> None:
        """One ``worker.stats`` line per interval with what happened since the last one."""
        last: Counter[str] = Counter()
        while True:
            await asyncio.sleep(_STATS_INTERVAL)
            delta = self.stats - last
            last = Counter(self.stats)
            if delta or self._tasks:
                event(
                    "worker.stats",
                    in_flight=len(self._tasks),
                    ahead=self._ahead,
                    clock_offset_ms=runner.due_clock.estimate_ms,
                    leases=runner.leases_held,
                    **runner.statements(),
                    **dict(delta),
                )

    def _finished(
        self, task: asyncio.Task[AttemptReport], *, fetched: Fetched, ahead: bool
    ) -> None:
        self._tasks.discard(task)
        if ahead:
            self._ahead -= 1
        else:
            self._slots.release()
        if task.cancelled():
            self.stats["cancelled"] += 1
            return  # not committed: the record is re-delivered after a restart
        error = task.exception()
        if error is not None:
            # A bug, not a target failure. The run is safe in the database (the reaper expires
            # its lease, the sweeper re-publishes it), so move on rather than wedge the partition.
            event(
                "run.attempt_crashed",
                logging.ERROR,
                run_id=fetched.run.run_id,
                attempt=fetched.run.attempt,
                error=repr(error),
            )
            self.stats["crashed"] += 1
            self._tracker.handled(fetched.partition, fetched.offset)
            return
        report = task.result()
        self.stats[report.status] += 1
        if report.commit:
            self._tracker.handled(fetched.partition, fetched.offset)
