"""Publish released runs to ``runs.ready`` (or, on the Kafka fast path, the job's own record to
the job's topic) and report which ones the broker acknowledged.

The record goes on as it was read: the same value bytes and the same headers (schema fingerprint
and routing) plus two stamps (``duetime-released-at-ms``, ``duetime-throttled-ms``: when it was
released, on the database clock, and how long throttling held it), keyed by ``run_id`` so that
one busy target spreads over every partition of ``runs.ready`` and every worker process
(throttling per target is the dispatcher's job, not the partitioner's). A release only counts
once the broker has it (``acks=all``); only then may the source record be acked.

At the due instant the produce calls run on the event loop, straight off the wheel (:meth:`send`);
the wait for the broker's answers runs in a worker thread (:meth:`settle`), so a broker that is
slow to answer, or a queue that is full, never blocks the loop that keeps consuming.

Every record gets its delivery report, success or failure: a release's outcome is its own, so
release rounds overlap. The loop produces the next round while the answers for the one before
are still awaited (runs falling due every few milliseconds would otherwise wait, round after
round, for the acknowledgements of the round ahead of them), and no outcome depends on the
producer's queue ever being found empty. A report is a Python call under the GIL (~0.4 µs); a
spike's reports are served on the settling thread after its produce calls, not between them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from confluent_kafka import KafkaException, Producer

from duetime.bus.kafka import producer_config
from duetime.bus.run_headers import RELEASED_AT_MS, THROTTLED_MS, epoch_ms
from duetime.config import Settings

from .holding import Release

__all__ = ["Outcomes", "ReadyPublisher", "release_stamp"]

T = TypeVar("T")

#: (release, None) when the broker acknowledged it, (release, reason) when it refused it.
Outcomes = list[tuple[Release[T], str | None]]

#: How long one poll (or flush) waits for answers before the settling thread counts them again.
_POLL_SLICE = 0.005
#: From how many records one send() is a spike's round, which the next settle flushes once. A
#: flush makes librdkafka send at once whatever is queued: right for a spike, whose batches are
#: full anyway; repeated under runs due every few ms, it sends a produce request per few records,
#: the broker's acknowledgements fall behind, more records wait, and the settle keeps flushing
#: (measured on the embedded broker: the target's consumers stalled for seconds).
_FLUSH_FROM = 1000


def release_stamp(release: Release[Any]) -> list[tuple[str, bytes]]:
    """The headers saying when ``release`` left (taken off the wheel, plus any throttled wait)
    and how long throttling held it."""
    released_ms = epoch_ms(release.taken_at) + release.throttled_ms
    return [
        (RELEASED_AT_MS, str(released_ms).encode("ascii")),
        (THROTTLED_MS, str(release.throttled_ms).encode("ascii")),
    ]


class ReadyPublisher(Generic[T]):
    """One confluent-kafka producer forwarding due records to ``runs.ready``, keyed by run_id."""

    def __init__(self, producer: Producer, topic: str, flush_timeout: float) -> None:
        self._producer = producer
        self._topic = topic
        self._flush_timeout = flush_timeout
        # Delivery reports (release, error or None), appended by librdkafka's callbacks inside
        # the settling thread's poll or flush, or by send() on the loop when the client itself
        # refuses a record. Taken from the front only (what is appended meanwhile stays): no
        # lock.
        self._reports: list[tuple[Release[T], Any]] = []
        self._produced = 0  # records handed to librdkafka by send(), on the loop
        self._produced_slowly = 0  # ... by the settling thread, once the queue had room
        self._reported = 0  # reports taken by settle()
        self._closed = False  # set once close() has flushed: a settle under way stops waiting
        self._big_round = False  # send() produced a spike's round since the last settle

    @property
    def outstanding(self) -> int:
        """Records produced whose report has not been taken by :meth:`settle` yet. Exact on the
        event loop while no settle is under way."""
        return self._produced + self._produced_slowly - self._reported

    @classmethod
    def from_settings(
        cls, settings: Settings, topic: str, flush_timeout: float
    ) -> ReadyPublisher[T]:
        return cls(Producer(producer_config(settings, **{"linger.ms": 20})), topic, flush_timeout)

    def send(self, releases: Sequence[Release[T]]) -> list[Release[T]]:
        """Hand ``releases`` to librdkafka now, on the calling thread; returns those its queue
        had no room for, which :meth:`settle` produces once there is room.

        Called on the event loop at the due instant: a spike's produce calls are the only work
        between the wheel and the broker (a thread hop first, or the round's bookkeeping, would
        come before the first record leaves). It blocks the loop for the calls alone, a few
        microseconds each (~0.5 s for 100k runs); it never waits for the broker.
        """
        produce, topic = self._producer.produce, self._topic
        stamps: dict[tuple[datetime, int], list[tuple[str, bytes]]] = {}
        reports = self._reports
        sent = 0
        try:
            for release in releases:
                routed = release.routed
                emission = routed.emission
                release.reports = reports  # the release is its own delivery callback
                try:
                    if emission is None:
                        # When it was released and how long throttling held it, for the worker's
                        # claim to record (one pair per round and wait: releases share them).
                        stamp_key = (release.taken_at, release.throttled_ms)
                        stamp = stamps.get(stamp_key)
                        if stamp is None:
                            stamp = stamps[stamp_key] = release_stamp(release)
                        produce(
                            topic,
                            routed.value,
                            routed.ready_key,
                            headers=cast(Any, [*routed.headers, *stamp]),
                            on_delivery=release,
                        )
                    else:  # the Kafka fast path: the job's own record on the job's own topic
                        produce(
                            emission.topic,
                            emission.value,
                            emission.key,
                            headers=cast(Any, emission.headers),
                            on_delivery=release,
                        )
                except KafkaException as exc:  # refused by the client itself (its size limit)
                    release(exc.args[0], None)
                sent += 1
        except BufferError:  # the queue is full: the rest waits for room, off the loop
            self._sent(sent)
            return list(releases[sent:])
        self._sent(sent)
        return []

    def _sent(self, count: int) -> None:
        self._produced += count
        if count >= _FLUSH_FROM:
            self._big_round = True

    async def settle(self, unsent: Sequence[Release[T]] = ()) -> Outcomes[T]:
        """Produce ``unsent`` (what :meth:`send` left), then wait for the broker's answers, in a
        worker thread: a broker slow to answer never blocks the event loop. Returns every
        outcome reported since the last settle; it waits until there is one for each record
        produced before it started, or ``flush_timeout`` has passed (records still unanswered
        are reported to a later settle). One settle at a time."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._settle_blocking, unsent)

    async def close(self) -> None:
        """Wait for the broker's answers (at most ``flush_timeout``); a settle under way then
        returns what was answered instead of waiting out its own timeout."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._producer.flush, self._flush_timeout)
        self._closed = True

    def _settle_blocking(self, unsent: Sequence[Release[T]]) -> Outcomes[T]:
        for release in unsent:
            self._produce_slowly(release)
        reports, poll = self._reports, self._producer.poll
        wanted = self._produced + self._produced_slowly
        deadline = time.monotonic() + self._flush_timeout
        if self._big_round:
            # A spike's round: its batches are full anyway, and one short flush sends the last
            # partial ones without waiting out linger.ms. Once only: a flush under a steady
            # stream of records would send them a few at a time (see _FLUSH_FROM).
            self._big_round = False
            self._producer.flush(_POLL_SLICE)
        while self._reported + len(reports) < wanted:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                break
            poll(min(remaining, _POLL_SLICE))
        count = len(reports)
        taken = reports[:count]
        del reports[:count]  # what a callback appended since stays for the next settle
        self._reported += count
        return [(release, None if err is None else str(err)) for release, err in taken]

    def _produce_slowly(self, release: Release[T]) -> None:
        """librdkafka's queue is full: serve delivery reports to make room, then produce."""
        release.reports = self._reports
        routed, emission = release.routed, release.routed.emission
        key: bytes | None
        if emission is None:
            to, value, key = self._topic, routed.value, routed.ready_key
            headers: Any = [*routed.headers, *release_stamp(release)]
        else:
            to, value, key = emission.topic, emission.value, emission.key
            headers = emission.headers
        while True:
            try:
                self._producer.produce(to, value, key, headers=headers, on_delivery=release)
                break
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                release(exc.args[0], None)
                break
        self._produced_slowly += 1
