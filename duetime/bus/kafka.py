"""confluent-kafka clients configured for duetime, and explicit topic creation.

Two profiles: ``local`` tunes for the embedded single-node broker (6 s sessions so joins take
~3 s, 50 ms fetch waits); ``prod`` keeps values that suit a real cluster.
Neither uses transactions or static membership: duetime is at-least-once with idempotency keys.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from duetime.config import Settings
from duetime.errors import BusError

from .topics import TopicCatalog, TopicSpec

__all__ = [
    "DeliveryTracker",
    "admin_client",
    "commit_offsets",
    "consumer_config",
    "create_topics",
    "make_producer",
    "message_headers",
    "producer_config",
]

Headers = list[tuple[str, str | bytes | None]]

# librdkafka's own log lines (a broker that went away, a retried request) go through Python's
# logging, so they come out in the service's format (text or JSON lines, duetime.logs) instead of
# being written by the C library straight to stderr. They are delivered when a client is polled.
LIBRDKAFKA_LOG = logging.getLogger("librdkafka")


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.require_kafka(),
        "client.id": settings.kafka_client_id,
        "logger": LIBRDKAFKA_LOG,
        # Off on the embedded broker: it keeps producer ids in memory, and after a restart it
        # answers UNKNOWN_PRODUCER_ID to a live idempotent producer forever (librdkafka bumps the
        # epoch and retries, every record times out), so no service could publish again until
        # restarted. Duplicates from client retries are harmless: consumers dedup on run_id.
        "enable.idempotence": settings.profile != "local",
        "acks": "all",
        "linger.ms": 5,
        # The embedded broker enforces no size limit; enforce Kafka's default on the client.
        "message.max.bytes": 1_000_000,
        "message.timeout.ms": 30_000,
        # librdkafka's murmur2_random equals the Java client's default partitioner.
        "partitioner": "murmur2_random",
    }
    config.update(overrides)
    return config


def consumer_config(settings: Settings, group_id: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.require_kafka(),
        "client.id": settings.kafka_client_id,
        "logger": LIBRDKAFKA_LOG,
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": "cooperative-sticky",
        "isolation.level": "read_uncommitted",
    }
    if settings.profile == "local":
        config.update(
            {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 50}
        )
    config.update(overrides)
    return config


def message_headers(message: Message) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers as the codecs take them (names with byte values)."""
    raw = message.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(k, v.encode("utf-8") if isinstance(v, str) else v) for k, v in items]


def commit_offsets(
    consumer: Consumer, offsets: list[TopicPartition], *, asynchronous: bool
) -> None:
    """Commit ``offsets``, waiting for the broker's answer unless ``asynchronous``."""
    if asynchronous:
        consumer.commit(offsets=offsets, asynchronous=True)
    else:
        consumer.commit(offsets=offsets, asynchronous=False)


def make_producer(settings: Settings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


def admin_client(settings: Settings) -> AdminClient:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.require_kafka(),
        "logger": LIBRDKAFKA_LOG,
    }
    return AdminClient(config)


def create_topics(
    settings: Settings, specs: Iterable[TopicSpec] | None = None, timeout: float = 15.0
) -> list[str]:
    """Create topics that do not exist yet; returns the names created. Existing ones are kept."""
    admin = admin_client(settings)
    wanted = list(specs if specs is not None else TopicCatalog(settings.topic_prefix).all())
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise BusError(f"cannot list topics: {exc}") from exc
    missing = [s for s in wanted if s.name not in existing]
    if not missing:
        return []
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, 1, config=dict(s.config)) for s in missing],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    created: list[str] = []
    for name, future in futures.items():
        try:
            future.result(timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BusError(f"cannot create topic {name}: {exc}") from exc
    return created


class DeliveryTracker:
    """Produce many records, then learn which ones the broker acknowledged.

    The outbox marks a run published only after its delivery report says so (invariant I7).
    """

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._lock = threading.Lock()
        self._acked: list[Any] = []
        self._failed: list[tuple[Any, str]] = []
        self.produced = 0

    def produce(
        self, token: Any, topic: str, key: bytes | None, value: bytes, headers: Headers
    ) -> None:
        def report(err: KafkaError | None, _msg: Any) -> None:
            with self._lock:
                if err is None:
                    self._acked.append(token)
                else:
                    self._failed.append((token, str(err)))

        while True:
            try:
                self._producer.produce(topic, value, key, headers=headers, on_delivery=report)
                self.produced += 1
                return
            except BufferError:
                # Local queue full: serve delivery reports to make room, then try again.
                self._producer.poll(0.1)

    def wait(self, timeout: float) -> tuple[Sequence[Any], Sequence[tuple[Any, str]]]:
        """Flush and return (acknowledged tokens, failed tokens with reasons)."""
        remaining = self._producer.flush(timeout)
        with self._lock:
            acked, failed = list(self._acked), list(self._failed)
            self._acked.clear()
            self._failed.clear()
        if remaining:
            failed.append((None, f"{remaining} records not acknowledged within {timeout}s"))
        return acked, failed
