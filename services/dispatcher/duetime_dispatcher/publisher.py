"""Publish released runs to ``runs.ready`` (or, on the Kafka fast path, the job's own record to
the job's topic) and report which ones the broker acknowledged.

The record goes on as it was read: the same value bytes and the same headers (schema fingerprint
and routing), keyed by ``run_id`` so that one busy target spreads over every partition of
``runs.ready`` and every worker process (throttling per target is the dispatcher's job, not the
partitioner's). A release only counts once the broker has it (``acks=all``); only then may the
source record be acked. The produce calls and the flush run in a worker thread, so a spike of
100k releases, or a broker that is slow to answer, never blocks the event loop that keeps
consuming and heartbeating.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from duetime.bus.kafka import producer_config
from duetime.config import Settings

from .holding import Release

__all__ = ["Outcomes", "ReadyPublisher"]

T = TypeVar("T")

#: (release, None) when the broker acknowledged it, (release, reason) when it refused it.
Outcomes = list[tuple[Release[T], str | None]]


class ReadyPublisher(Generic[T]):
    """One confluent-kafka producer forwarding due records to ``runs.ready``, keyed by run_id."""

    def __init__(self, producer: Producer, topic: str, flush_timeout: float) -> None:
        self._producer = producer
        self._topic = topic
        self._flush_timeout = flush_timeout
        self._lock = threading.Lock()
        # Delivery reports land here from librdkafka's callbacks; a report for a record sent in
        # an earlier round (its flush timed out) is returned with a later round's outcomes.
        self._outcomes: Outcomes[T] = []

    @classmethod
    def from_settings(
        cls, settings: Settings, topic: str, flush_timeout: float
    ) -> ReadyPublisher[T]:
        return cls(Producer(producer_config(settings)), topic, flush_timeout)

    async def publish(self, releases: Sequence[Release[T]]) -> Outcomes[T]:
        """Send ``releases`` and wait for the broker's answers (at most ``flush_timeout``)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._publish_blocking, releases)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._producer.flush, self._flush_timeout)

    def _publish_blocking(self, releases: Sequence[Release[T]]) -> Outcomes[T]:
        produce, poll = self._producer.produce, self._producer.poll
        topic = self._topic
        for release in releases:
            routed = release.routed
            emission = routed.emission
            key: bytes | None
            if emission is None:
                to, value, key = topic, routed.value, str(routed.run_id).encode("ascii")
                headers: Any = routed.headers
            else:  # the Kafka fast path: the job's own record on the job's own topic
                to, value, key = emission.topic, emission.value, emission.key
                headers = emission.headers
            report = self._reporter(release)
            while True:
                try:
                    produce(to, value, key, headers=headers, on_delivery=report)
                    break
                except BufferError:
                    # librdkafka's queue is full: serve delivery reports to make room.
                    poll(0.05)
                except KafkaException as exc:
                    report(exc.args[0], None)
                    break
        self._producer.flush(self._flush_timeout)
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
        return outcomes

    def _reporter(self, release: Release[T]) -> Any:
        def report(err: KafkaError | None, _msg: Any) -> None:
            with self._lock:
                self._outcomes.append((release, None if err is None else str(err)))

        return report
