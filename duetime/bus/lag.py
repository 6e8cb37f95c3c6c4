"""How far a consumer group is behind on a topic: high watermark minus committed offset.

Read from outside the group: the probe's consumer carries the group's id so it may fetch the
group's committed offsets, but it never subscribes, so it never joins the group and never moves
a partition. A partition the group has not committed yet counts from its low watermark (the group
reads from ``earliest``).
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from duetime.config import Settings
from duetime.errors import BusError

from .kafka import consumer_config

__all__ = ["ConsumerLag", "ConsumerLagProbe"]


@dataclass(frozen=True)
class ConsumerLag:
    total: int
    # partition -> records behind
    partitions: dict[int, int]


class ConsumerLagProbe:
    """Measures one group's lag on one topic; make one and call :meth:`measure` repeatedly."""

    def __init__(self, settings: Settings, group: str, topic: str, timeout: float = 5.0) -> None:
        self.group = group
        self.topic = topic
        self.timeout = timeout
        self._settings = settings
        self._consumer: Consumer | None = None

    def measure(self, topic: str | None = None) -> ConsumerLag:
        """The group's lag now on its topic (or on ``topic``, with the same client); ``BusError``
        if the broker cannot tell within the timeout."""
        topic = topic or self.topic
        try:
            return self._measure(topic)
        except KafkaException as exc:
            self.close()  # a fresh client next time
            where = f"{self.group} on {topic}"
            raise BusError(f"cannot measure the lag of {where}: {exc}") from exc

    def _measure(self, topic: str) -> ConsumerLag:
        if self._consumer is None:
            self._consumer = Consumer(
                consumer_config(self._settings, self.group, **{"enable.auto.commit": False})
            )
        consumer = self._consumer
        metadata = consumer.list_topics(topic, timeout=self.timeout).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise BusError(f"topic {topic} is not there")
        wanted = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
        committed = consumer.committed(wanted, timeout=self.timeout)
        lag: dict[int, int] = {}
        for tp in committed:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, tp.partition), timeout=self.timeout, cached=False
            )
            start = tp.offset if tp.offset >= 0 else low
            lag[tp.partition] = max(0, high - start)
        # Never subscribed, so never polled otherwise: serve its queued log lines and errors
        # (duetime.bus.kafka routes them to logging), which would pile up over a long outage.
        consumer.poll(0)
        return ConsumerLag(sum(lag.values()), lag)

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()
