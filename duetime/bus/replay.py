"""Reading a topic again from a timestamp, and decoding any duetime record for people.

``read_since`` seeks every partition to the broker's answer for the timestamp
(``offsets_for_times``), then skips on the client every record whose timestamp is before it, and
reads each partition to its end as it was when the read began (``enable.partition.eof``; the high
watermark comes with each fetch response). The client-side skip makes the result exact whatever
the broker's answer is, as long as that answer is never *later* than the first record at or
after the timestamp:

- Apache Kafka answers with the earliest offset whose record timestamp is at or after the
  timestamp (-1, the end, when there is none), so the skip only removes records written with an
  earlier timestamp after later ones (producer-set timestamps are not ordered);
- the local tansu broker matches the *append time of the record batch* instead, and answers 0
  when nothing is newer (measured in docs/consumers.md): the read then starts
  early, possibly at the beginning, and the skip removes what is older. Correct, only slower.

A record timestamped after the moment it was appended (a producer that sets future timestamps)
could make Apache Kafka's answer too late for the records before it; duetime's producers keep
the default CreateTime, the moment of the produce call.

The read uses a consumer group of its own and never commits, so it moves no other reader.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from duetime.config import Settings
from duetime.errors import BusError

from .codec import SCHEMA_HEADER, AvroCodec
from .kafka import consumer_config
from .records import (
    JOB_DEFINITIONS,
    JOB_REJECTIONS,
    RUN_DEAD,
    RUN_EVENTS,
    RUN_HEARTBEATS,
    RUN_RESULTS,
)

__all__ = ["ReplayStats", "ReplayedRecord", "codecs_by_fingerprint", "read_since", "to_json"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_POLL = 0.5


@dataclass(frozen=True)
class ReplayedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: datetime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class ReplayStats:
    """What a replay did, for its summary line (and the docs' measurements)."""

    partitions: int = 0
    # partition -> the offset the broker answered for the timestamp (-1 = nothing newer)
    sought: dict[int, int] = field(default_factory=dict)
    read: int = 0
    older: int = 0  # skipped on the client: timestamp before --since
    newer: int = 0  # skipped: timestamp at or after --until
    returned: int = 0


def _ms(instant: datetime) -> int:
    return int((instant - _EPOCH).total_seconds() * 1000)


def _record(message: Message) -> ReplayedRecord:
    _kind, stamp = message.timestamp()
    raw = message.headers() or []
    items = raw.items() if isinstance(raw, Mapping) else raw
    return ReplayedRecord(
        topic=message.topic() or "",
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        timestamp=datetime.fromtimestamp(stamp / 1000, UTC),
        key=message.key(),
        value=message.value(),
        headers=[(k, v.encode() if isinstance(v, str) else v) for k, v in items],
    )


def read_since(
    settings: Settings,
    topic: str,
    since: datetime,
    until: datetime | None = None,
    *,
    stats: ReplayStats | None = None,
    timeout: float = 10.0,
    consumer_factory: Callable[[dict[str, Any]], Consumer] = Consumer,
) -> Iterator[ReplayedRecord]:
    """Every record of ``topic`` with ``since <= timestamp < until``, partition by partition in
    offset order (partitions interleaved as fetched). ``BusError`` if the topic is not there."""
    stats = stats if stats is not None else ReplayStats()
    since_ms = _ms(since)
    until_ms = _ms(until) if until is not None else None
    group = f"{settings.topic_prefix}replay-{uuid.uuid4().hex[:12]}"
    consumer = consumer_factory(
        consumer_config(
            settings, group, **{"enable.partition.eof": True, "enable.auto.commit": False}
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise BusError(f"topic {topic} is not there")
        wanted = [TopicPartition(topic, p, since_ms) for p in sorted(metadata.partitions)]
        stats.partitions = len(wanted)
        found = consumer.offsets_for_times(wanted, timeout=timeout)
        start: list[TopicPartition] = []
        for tp in found:
            stats.sought[tp.partition] = tp.offset
            if tp.offset >= 0:
                start.append(TopicPartition(topic, tp.partition, tp.offset))
            # -1: no record at or after the timestamp (Apache Kafka); nothing to read there.
        if not start:
            return
        consumer.assign(start)
        open_partitions = {tp.partition for tp in start}
        while open_partitions:
            for message in consumer.consume(1000, _POLL):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_partitions.discard(message.partition() or 0)
                        continue
                    raise BusError(f"replay of {topic}: {error}")
                stats.read += 1
                _kind, stamp = message.timestamp()
                if stamp < since_ms:
                    stats.older += 1
                    continue
                if until_ms is not None and stamp >= until_ms:
                    stats.newer += 1
                    continue
                stats.returned += 1
                yield _record(message)
    except KafkaException as exc:
        raise BusError(f"replay of {topic}: {exc}") from exc
    finally:
        consumer.close()


def codecs_by_fingerprint() -> dict[bytes, AvroCodec[Any]]:
    """Every duetime record schema by the fingerprint its ``duetime-schema`` header carries."""
    codecs: list[AvroCodec[Any]] = [
        JOB_DEFINITIONS,
        JOB_REJECTIONS,
        RUN_EVENTS,
        RUN_HEARTBEATS,
        RUN_RESULTS,
        RUN_DEAD,
    ]
    return {codec.fingerprint.encode("ascii"): codec for codec in codecs}


def _plain(value: Any) -> Any:
    """An Avro value as JSON: instants in ISO-8601 UTC, bytes in base64, a named union branch
    as an object with its ``type``."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        inner = _plain(value[1])
        return {"type": value[0], **inner} if isinstance(inner, dict) else inner
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _text_or_base64(data: bytes | None) -> dict[str, str] | str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def to_json(record: ReplayedRecord, codecs: Mapping[bytes, AvroCodec[Any]]) -> dict[str, Any]:
    """One record for a person or a script: where it was, its key and headers as text, and its
    value decoded by the schema its fingerprint header names (``value_base64`` and
    ``decode_error`` when it does not decode)."""
    headers = dict(record.headers)
    doc: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": _plain(record.timestamp),
        "key": _text_or_base64(record.key),
        "headers": [[k, _text_or_base64(v)] for k, v in record.headers],
    }
    fingerprint = headers.get(SCHEMA_HEADER)
    codec = codecs.get(fingerprint) if fingerprint else None
    if record.value is not None and codec is not None:
        try:
            doc["schema"] = codec.name
            doc["value"] = _plain(codec.read(record.value))
            return doc
        except BusError as exc:
            doc["decode_error"] = str(exc)
    elif record.value is not None:
        doc["decode_error"] = "no duetime-schema header with a known fingerprint"
    doc["value_base64"] = (
        None if record.value is None else base64.b64encode(record.value).decode("ascii")
    )
    return doc
