"""Heartbeats and results onto their topics, keyed by run_id (Avro, schema fingerprint header)."""

from __future__ import annotations

from duetime.bus.records import RUN_HEARTBEATS, RUN_RESULTS
from duetime.bus.result_encoding import encode_result
from duetime.bus.topics import TopicCatalog
from duetime.events import RunHeartbeat, RunResult

from .producer import AsyncProducer

__all__ = ["BusEvents"]


class BusEvents:
    """The ``RunEvents`` port on Kafka: fire-and-forget, the database stays authoritative."""

    def __init__(self, producer: AsyncProducer, catalog: TopicCatalog) -> None:
        self._producer = producer
        self._catalog = catalog

    def heartbeat(self, heartbeat: RunHeartbeat) -> None:
        self._producer.publish(
            self._catalog.heartbeats,
            str(heartbeat.run_id).encode("ascii"),
            RUN_HEARTBEATS.encode(heartbeat),
            RUN_HEARTBEATS.headers(),
        )

    def result(self, result: RunResult) -> None:
        self._producer.publish(
            self._catalog.results,
            str(result.run_id).encode("ascii"),
            encode_result(result),
            RUN_RESULTS.headers(),
        )
