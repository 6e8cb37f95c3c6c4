"""A downstream consumer of a duetime topic that needs nothing of duetime but its schemas.

Every value on a duetime topic is schemaless Avro (no magic byte, no registry id) written with
one of the schemas in ``schemas/``; the record's header ``duetime-schema`` holds the writer
schema's fingerprint: CRC-64-AVRO of its parsing canonical form, 16 hex digits. A consumer loads
the schemas it knows, indexes them by fingerprint, and decodes each record with the schema its
header names; a record whose fingerprint it does not know was written with a newer schema, and is
set aside rather than decoded into wrong data (docs/consumers.md).

duetime is at-least-once: the same record can arrive twice (a producer retry, a re-emit, a
replay). Deduplicate on what identifies it (``run_id`` and ``attempt`` for run events, ``run_id``
for dead runs) and commit offsets only after the records are processed.

Run it next to a stack (``duetime up`` prints the broker address, and ``.duetime/stack.env``
holds it)::

    python examples/topic_consumer.py --bootstrap 127.0.0.1:PORT --topic duetime.runs.dead \\
        --group my-dead-run-alerts

It prints each record as one JSON line; put your processing in ``process``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError
from fastavro import schemaless_reader
from fastavro.schema import fingerprint, load_schema, parse_schema, to_parsing_canonical_form

SCHEMA_HEADER = "duetime-schema"
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
# The top-level record schemas; the others (duetime.HttpTarget, ...) are named types they use,
# found by load_schema in the same directory.
TOPIC_SCHEMAS = (
    "job_definition.avsc",
    "job_rejected.avsc",
    "run_event.avsc",
    "run_heartbeat.avsc",
    "run_result.avsc",
    "run_dead.avsc",
)


class Schemas:
    """The known writer schemas by fingerprint (the value of the ``duetime-schema`` header)."""

    def __init__(self, directory: Path = SCHEMAS, files: Iterable[str] = TOPIC_SCHEMAS) -> None:
        self.by_fingerprint: dict[bytes, tuple[str, Any]] = {}
        for name in files:
            schema = cast(dict[str, Any], load_schema(str(directory / name), _write_hint=False))
            key = fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")
            self.by_fingerprint[key.encode("ascii")] = (schema["name"], parse_schema(schema))

    def decode(
        self, value: bytes, headers: Sequence[tuple[str, bytes | None]]
    ) -> tuple[str, dict[str, Any]]:
        """``(schema name, record)``; ``LookupError`` for a record of an unknown schema."""
        found = dict(headers).get(SCHEMA_HEADER)
        if found is None or found not in self.by_fingerprint:
            raise LookupError(f"unknown schema fingerprint {found!r}")
        name, parsed = self.by_fingerprint[found]
        record = schemaless_reader(io.BytesIO(value), parsed, None)
        if not isinstance(record, dict):
            raise ValueError(f"{name}: not a record")
        return name, record


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def process(topic: str, key: bytes | None, schema: str, record: dict[str, Any]) -> None:
    """Your processing goes here (idempotent: the same record can come twice)."""
    line = {"topic": topic, "key": key.decode() if key else None, "schema": schema}
    print(json.dumps({**line, "value": jsonable(record)}), flush=True)


def run(bootstrap: str, topic: str, group: str, schemas: Schemas, max_records: int | None) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",  # duetime uses no transactions
        }
    )
    consumer.subscribe([topic])
    seen = 0
    try:
        while max_records is None or seen < max_records:
            batch = consumer.consume(500, 1.0)
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        print(f"consumer error: {error}", file=sys.stderr)
                    continue
                seen += 1
                raw = message.headers() or []
                items = raw.items() if isinstance(raw, dict) else raw
                headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
                value = message.value()
                try:
                    if value is None:
                        raise LookupError("no value")
                    schema, record = schemas.decode(value, headers)
                except (LookupError, ValueError, EOFError) as exc:
                    # Newer schema or not a duetime record: keep it aside, never guess.
                    print(f"skipped offset {message.offset()}: {exc}", file=sys.stderr)
                    continue
                process(message.topic() or topic, message.key(), schema, record)
            if batch:
                consumer.commit(asynchronous=False)  # after processing: at-least-once
    finally:
        consumer.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True, help="host:port of the broker")
    parser.add_argument("--topic", required=True, help="the full topic name (duetime.runs.dead)")
    parser.add_argument("--group", required=True, help="your consumer group")
    parser.add_argument("--schemas", type=Path, default=SCHEMAS, help="the schemas/ directory")
    parser.add_argument("--max-records", type=int, help="stop after this many records")
    args = parser.parse_args(argv)
    return run(args.bootstrap, args.topic, args.group, Schemas(args.schemas), args.max_records)


if __name__ == "__main__":
    raise SystemExit(main())
