"""The reaper's consumer of ``runs.heartbeats`` and ``runs.results``, on a thread of its own.

Every reaper is a member of the group ``<prefix>reaper``; the group splits the partitions of
both topics between them. Heartbeats and results are keyed by ``run_id`` and both topics have the
same partition count, and the group uses the *range* assignor, which gives a member the same
partition numbers of both topics: a run's heartbeats and its results reach the same reaper. (If
they did not, nothing would break: a watch whose result went elsewhere comes due, and the database
says the attempt is no longer running.)

One loop, one thread (librdkafka wants one thread per consumer; the book needs no lock):

1. take the records that have arrived, waiting no longer than until the next watch comes due,
   and fold them into the ``LeaseBook``;
2. ``LeaseWatcher.run_once(now)``: ask the database about the watches that came due, in batches;
3. every ``commit_interval``, commit what the book says may be committed (``positions``).

Offsets are committed at least once: a record stays uncommitted while it backs a watch, so a
reaper that dies (or loses a partition) leaves the next one to read every attempt still watched
again. Attempts older than that, or whose records the broker lost, are the safety-net scan's.
Rebalances: the offsets of revoked partitions are committed synchronously before they go, and
their watches are dropped. A record that does not decode is logged and committed past.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from duetime.bus.kafka import commit_offsets, consumer_config, message_headers
from duetime.bus.records import RUN_HEARTBEATS, RUN_RESULTS
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import CodecError, DuetimeError
from duetime.logs import event
from duetime.store import Store

from .clusters import ClusterJudge
from .config import ReaperConfig
from .expiry import ExpiryCounts, LeaseExpirer
from .lease_book import LeaseBook, Partition
from .watcher import DbClock, LeaseJudge, LeaseWatcher, WatchStats

__all__ = ["LeaseStream", "make_lease_stream", "reaper_consumer_config"]

log = logging.getLogger("duetime.reaper")

_MAX_RECORDS = 1000
_PACE = 0.05  # seconds between full batches
_ERROR_PAUSE = 1.0


def reaper_consumer_config() -> dict[str, Any]:
    """What the reaper's consumer sets beyond ``duetime.bus.kafka.consumer_config``."""
    # range: the same partition numbers of both topics go to the same member (see above).
    # The reaper is not latency-sensitive (leases last seconds): it fetches in large batches at
    # most every 500 ms rather than every 50 ms, so at a spike's due instant, when 100k results
    # land on runs.results, it does not compete with the dispatcher and the targets' consumers
    # for the broker and the cores (single runs of a 20k Kafka spike here: start p50 203 ms
    # with no stream, 314 ms with the stream fetching every 50 ms; runs spread by +-100 ms).
    return {
        "partition.assignment.strategy": "range",
        "fetch.wait.max.ms": 500,
        "fetch.min.bytes": 262_144,
    }


class LeaseStream:
    """Drives one consumer on its own thread (see the module docstring)."""

    def __init__(
        self,
        consumer: Consumer,
        catalog: TopicCatalog,
        watcher: LeaseWatcher,
        clock: DbClock,
        read_db_clock: Callable[[], datetime],
        config: ReaperConfig,
    ) -> None:
        self._consumer = consumer
        self._heartbeats = catalog.heartbeats
        self._results = catalog.results
        self.watcher = watcher
        self.book: LeaseBook = watcher.book
        self.clock = clock
        self._read_db_clock = read_db_clock
        self.config = config
        self._committed: dict[Partition, int] = {}
        self._commit_due = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.assigned = threading.Event()  # set on the first assignment (tests wait on it)
        self.partitions: frozenset[Partition] = frozenset()  # assigned now
        self.stats = WatchStats()  # everything the watcher did since the start

    # the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="duetime-lease-stream", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the loop; the thread commits what it may and leaves the group."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        self._consumer.subscribe(
            [self._heartbeats, self._results],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        event(log, "reaper.stream_started", topics=f"{self._heartbeats},{self._results}")
        try:
            while not self._stop.is_set():
                try:
                    self.step()
                except (DuetimeError, KafkaException) as exc:
                    # The loop must outlive a broker or database outage; the scan covers it.
                    event(log, "reaper.stream_failed", logging.ERROR, error=exc)
                    self._stop.wait(_ERROR_PAUSE)
        finally:
            self._commit(asynchronous=False)
            self._consumer.close()

    def step(self) -> None:
        """One pass of the loop: read, fold, expire what came due, commit now and then."""
        if self.clock.stale(self.config.clock_interval):
            self._measure_clock()
        messages = self._consumer.consume(_MAX_RECORDS, self._wait())
        for message in messages:
            self._fold(message)
        if len(messages) == _MAX_RECORDS:
            # A flood (a spike's results): fold it at a steady pace instead of all at once,
            # leaving the cores to the release path. 20k records/s is far above any lease rate.
            self._stop.wait(_PACE)
        self.stats += self.watcher.run_once(self.clock.now())
        now = time.monotonic()
        if now >= self._commit_due:
            self._commit(asynchronous=True)
            self._commit_due = now + self.config.commit_interval.total_seconds()

    def _wait(self) -> float:
        longest = self.config.poll_timeout.total_seconds()
        due = self.book.next_due()
        if due is None:
            return longest
        return max(0.0, min(longest, (due - self.clock.now()).total_seconds()))

    def _measure_clock(self) -> None:
        try:
            self.clock.measure(self._read_db_clock)
        except DuetimeError as exc:
            # Keep the last offset; expiry is judged by the database anyway.
            event(log, "reaper.clock_failed", logging.WARNING, error=exc)

    # records ------------------------------------------------------------------------------
    def _fold(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                event(log, "reaper.consumer_error", logging.WARNING, error=str(error))
            return
        topic, index, offset = message.topic(), message.partition(), message.offset()
        if topic is None or index is None or offset is None:
            return
        partition: Partition = (topic, index)
        try:
            if topic == self._heartbeats:
                self.book.heartbeat(
                    RUN_HEARTBEATS.decode(message.value(), message_headers(message)),
                    partition,
                    offset,
                )
            elif self._watched(message.key()):
                self.book.result(
                    RUN_RESULTS.decode(message.value(), message_headers(message)), partition, offset
                )
            else:
                # The result of a run the book does not watch (the Kafka fast path's, a short
                # attempt's that was never announced, one read before its attempt's heartbeat):
                # nothing to end, so not decoded. A heartbeat of it read later starts a watch the
                # database then reports ended.
                self.book.skip(partition, offset)
        except CodecError as exc:
            event(
                log,
                "reaper.record_undecodable",
                logging.ERROR,
                topic=topic,
                partition=index,
                offset=offset,
                error=str(exc),
            )
            self.book.skip(partition, offset)

    def _watched(self, key: bytes | str | None) -> bool:
        """Whether the book watches the run a results record is keyed by (the run id); a record
        without a usable key is decoded to find out."""
        if not self.book:
            return False
        try:
            text = key.decode("ascii") if isinstance(key, bytes) else key
            return text is None or self.book.get(uuid.UUID(text)) is not None
        except (UnicodeDecodeError, ValueError):
            return True

    # commits and rebalances -----------------------------------------------------------------
    def _commit(self, *, asynchronous: bool, only: set[Partition] | None = None) -> None:
        positions = {
            partition: offset
            for partition, offset in self.book.positions().items()
            if (only is None or partition in only) and self._committed.get(partition) != offset
        }
        if not positions:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        try:
            commit_offsets(self._consumer, offsets, asynchronous=asynchronous)
        except KafkaException as exc:
            # Not fatal: the records are read again, and folding them twice changes nothing.
            event(log, "reaper.commit_failed", logging.WARNING, error=str(exc))
            return
        self._committed.update(positions)

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.partitions |= {(tp.topic, tp.partition) for tp in partitions}
        self.assigned.set()
        event(log, "reaper.stream_assigned", partitions=_names(partitions))

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self._commit(asynchronous=False, only=keys)
        self._forget(keys)
        event(log, "reaper.stream_revoked", partitions=_names(partitions))

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._forget({(tp.topic, tp.partition) for tp in partitions})
        event(log, "reaper.stream_lost", logging.WARNING, partitions=_names(partitions))

    def _forget(self, keys: set[Partition]) -> None:
        self.partitions -= keys
        dropped = self.book.revoke(keys)
        for key in keys:
            self._committed.pop(key, None)
        if dropped:
            event(log, "reaper.watches_dropped", watches=dropped)


def _names(partitions: list[TopicPartition]) -> str:
    return ",".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "-"


def make_lease_stream(
    settings: Settings,
    store: Store,
    config: ReaperConfig,
    on_expired: Callable[[ExpiryCounts, str], None] | None = None,
    *,
    clusters: Sequence[Store] = (),
) -> LeaseStream:
    """The reaper's stream on the group ``<prefix>reaper``, judging leases through ``store``.

    With several clusters (``clusters``: every cluster's store, in cluster order) each batch is
    judged by every cluster (``ClusterJudge``: a heartbeat names no job, so not its cluster);
    the clock estimate is the home cluster's (``store``). It only decides when to ask: a
    cluster whose clock runs a little ahead answers "alive", and is asked again later.
    """
    catalog = TopicCatalog(settings.topic_prefix)
    clock = DbClock()

    def read_db_clock() -> datetime:
        with store.tx() as tx:
            return tx.db_now()

    book = LeaseBook(
        clock.now(),
        grace=config.expiry_grace,
        recheck=config.recheck_interval,
        ended_memory=config.ended_memory,
    )
    judges = [
        LeaseExpirer(s, batch_size=config.batch_size, on_expired=on_expired)
        for s in (clusters or (store,))
    ]
    judge: LeaseJudge = judges[0] if len(judges) == 1 else ClusterJudge(judges)
    watcher = LeaseWatcher(book, judge, batch_size=config.batch_size)
    consumer = Consumer(consumer_config(settings, catalog.reaper_group, **reaper_consumer_config()))
    return LeaseStream(consumer, catalog, watcher, clock, read_db_clock, config)
