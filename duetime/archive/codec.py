"""Archived runs as Avro object container files (``schemas/run_archive.avsc``), and back.

An object holds the runs of one day partition, each with its attempts, in (scheduled_for,
job_id) order, deflate-compressed. The container's sync marker is derived from the day instead
of drawn at random, so the same rows always give the same bytes: the object's SHA-256, which
names it (``duetime.archive.keys``), is then stable across a retried archive.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime
from typing import Any, cast

from fastavro import reader, writer
from fastavro.schema import fingerprint, load_schema, parse_schema, to_parsing_canonical_form

from duetime.bus.codec import schema_dir
from duetime.errors import ArchiveError

from .model import ArchivedAttempt, ArchivedRun

__all__ = [
    "SCHEMA_FINGERPRINT",
    "ArchivedAttempt",
    "ArchivedRun",
    "decode_runs",
    "encode_runs",
    "sha256_hex",
]

_SCHEMA: dict[str, Any] = cast(
    dict[str, Any], load_schema(str(schema_dir() / "run_archive.avsc"), _write_hint=False)
)
_PARSED: Any = parse_schema(_SCHEMA)
SCHEMA_FINGERPRINT: str = fingerprint(to_parsing_canonical_form(_SCHEMA), "CRC-64-AVRO")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _to_record(run: ArchivedRun) -> dict[str, Any]:
    record = {name: getattr(run, name) for name in run.__dataclass_fields__ if name != "attempts"}
    record["run_id"] = str(run.run_id)
    record["attempts"] = [dict(vars(a)) for a in run.attempts]
    return record


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _from_record(record: Mapping[str, Any]) -> ArchivedRun:
    times = (
        "scheduled_for",
        "due_at",
        "published_at",
        "released_at",
        "started_at",
        "finished_at",
        "dead_published_at",
        "created_at",
        "updated_at",
    )
    fields = {k: v for k, v in record.items() if k != "attempts"}
    for name in times:
        fields[name] = _utc(fields.get(name))
    fields["run_id"] = uuid.UUID(str(record["run_id"]))
    attempts = tuple(
        ArchivedAttempt(
            **{
                **a,
                "started_at": _utc(a["started_at"]),
                "finished_at": _utc(a.get("finished_at")),
            }
        )
        for a in record.get("attempts") or ()
    )
    return ArchivedRun(**fields, attempts=attempts)


def encode_runs(day: date, runs: Iterable[ArchivedRun]) -> bytes:
    """One Avro object container file; the same ``day`` and rows give the same bytes."""
    buffer = io.BytesIO()
    marker = hashlib.sha256(f"duetime-archive:{day.isoformat()}".encode()).digest()[:16]
    writer(
        buffer,
        _PARSED,
        (_to_record(r) for r in runs),
        codec="deflate",
        sync_marker=marker,
        metadata={"duetime.day": day.isoformat(), "duetime.schema": SCHEMA_FINGERPRINT},
    )
    return buffer.getvalue()


def decode_runs(data: bytes) -> list[ArchivedRun]:
    """Every run of an object; ``ArchiveError`` if it is not a complete container file of
    this schema (fastavro raises many types on damaged input)."""
    try:
        return [_from_record(cast(Mapping[str, Any], r)) for r in reader(io.BytesIO(data))]
    except Exception as exc:
        raise ArchiveError(f"archive object does not decode: {type(exc).__name__}: {exc}") from exc
