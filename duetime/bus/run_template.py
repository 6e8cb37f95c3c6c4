"""RunEvent records encoded and decoded per job, not per run: the planner's publishing and the
dispatcher's intake hot paths.

A RunEvent's Avro encoding is the concatenation of its fields' encodings in schema order. Every
field but four (run_id, scheduled_for, due_at, attempt) comes from the job, so ``RunTemplate``
encodes the job's part once and ``encode`` adds the four per-run fields. Both are written here
directly (Avro's binary encoding of strings, zig-zag varints, doubles, unions and arrays), which
costs a fraction of a general encoder's per-record setup. The bytes are identical to
``RUN_EVENTS.encode`` of the same RunEvent: the unit tests compare them over random runs and
targets, so a schema change that this module does not follow fails the tests, and the order of
the leading fields is also checked at import.

``read_head`` is the other direction's first half: the per-run head (run_id, job_id, tenant, the
two instants and the attempt) read by hand. The job's tail (the same bytes for every run of one
job version) is what the dispatcher's fast path decodes once, with the schema's own codec, and
remembers by its bytes, so it runs no Avro decode per run of a job
(:mod:`duetime_dispatcher.fast_path`).
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta

from duetime.model import HeaderValue, HttpTarget, SecretRef, Target
from duetime.schedule import RetryPolicy

from .records import RUN_EVENTS

__all__ = ["EPOCH", "FIRST_US", "LAST_US", "RunTemplate", "read_head"]

# The fields in schema order; the per-job tail starts at max_attempts.
_FIELDS = (
    "run_id",
    "job_id",
    "tenant",
    "scheduled_for",
    "due_at",
    "attempt",
    "max_attempts",
    "target_service",
    "target",
    "lease_ms",
    "heartbeat_ms",
    "retry",
)
_TARGET_BRANCHES = ("duetime.HttpTarget", "duetime.KafkaTarget")


def _check_schema() -> None:
    names = tuple(f["name"] for f in RUN_EVENTS.schema["fields"])
    if names != _FIELDS:
        raise RuntimeError(
            f"run_event.avsc fields are {names}, duetime/bus/run_template.py writes {_FIELDS}"
        )
    union = RUN_EVENTS.schema["fields"][_FIELDS.index("target")]["type"]
    branches = tuple(_full_name(b) for b in union)
    if branches != _TARGET_BRANCHES:
        raise RuntimeError(f"run_event.avsc target branches are {branches}, not {_TARGET_BRANCHES}")


def _full_name(branch: str | dict[str, str]) -> str:
    if isinstance(branch, str):
        return branch
    name = branch["name"]
    return name if "." in name else f"{branch.get('namespace', 'duetime')}.{name}"


_check_schema()
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The instants an aware datetime holds, in epoch µs (read_head's unit): beyond them the codec
#: refuses the value.
FIRST_US = (datetime.min.replace(tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
LAST_US = (datetime.max.replace(tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
_DOUBLE = struct.Struct("<d")
_SMALL = tuple(bytes((i << 1,)) for i in range(64))  # 0..63 zig-zag into one byte
_NULL = b"\x00"
_PRESENT = b"\x02"  # union branch 1 (zig-zag of 1): the string of a ["null", "string"]


def _varint(value: int) -> bytes:
    """An Avro int/long: zig-zag, then base-128 groups, least significant first."""
    if 0 <= value < 64:
        return _SMALL[value]
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(value: str) -> bytes:
    data = value.encode()
    return _varint(len(data)) + data


def _optional(value: str | None) -> bytes:
    return _NULL if value is None else _PRESENT + _string(value)


def _ms(value: timedelta) -> int:
    """Whole milliseconds, truncated toward zero as the codec's ``int(value / 1 ms)`` does."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    return micros // 1000 if micros >= 0 else -(-micros // 1000)


def _micros(instant: datetime) -> int:
    """timestamp-micros of an aware datetime, exactly as the codec computes it."""
    if instant.tzinfo is None:
        raise ValueError("timestamp without a zone")
    delta = instant - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# The most instants each memory below holds (encoded ones, read ones): emptied when full.
_INSTANTS_MAX = 4096
# Encoded UTC instants: a batch's runs share a few (every job due each whole second), and a
# look-up costs a fifteenth of encoding one. UTC only: two datetimes of one zone that differ
# only in ``fold`` (the two 01:30 of a DST overlap) are equal and hash alike, yet are different
# instants.
_ENCODED: dict[datetime, bytes] = {}


def _instant(instant: datetime) -> bytes:
    """``_varint(_micros(instant))``, remembered for UTC instants."""
    if instant.tzinfo is not UTC:
        return _varint(_micros(instant))
    encoded = _ENCODED.get(instant)
    if encoded is None:
        encoded = _varint(_micros(instant))
        if len(_ENCODED) >= _INSTANTS_MAX:
            _ENCODED.clear()
        _ENCODED[instant] = encoded
    return encoded


def _header_value(value: HeaderValue) -> bytes:
    """Header.value is the union ["string", SecretRef]: branch 0 a literal, branch 1 a reference
    (its name, then its prefix)."""
    if isinstance(value, SecretRef):
        return _varint(1) + _string(value.name) + _string(value.prefix)
    return _varint(0) + _string(value)


def _target(target: Target) -> bytes:
    if isinstance(target, HttpTarget):
        parts = [_varint(0), _string(target.url), _string(target.method)]
        if target.headers:
            parts.append(_varint(len(target.headers)))
            parts.extend(_string(name) + _header_value(value) for name, value in target.headers)
        parts += [_varint(0), _optional(target.body), _varint(_ms(target.timeout))]
        return b"".join(parts)
    return b"".join(
        (_varint(1), _string(target.topic), _optional(target.key), _string(target.value))
    )


class RunTemplate:
    """The bytes of one job's RunEvents, but for run_id, scheduled_for, due_at and attempt."""

    __slots__ = ("_job", "_tail")

    def __init__(
        self,
        *,
        job_id: str,
        tenant: str,
        max_attempts: int,
        target_service: str,
        target: Target,
        lease: timedelta,
        heartbeat_interval: timedelta,
        retry: RetryPolicy,
    ) -> None:
        self._job = _string(job_id) + _string(tenant)
        self._tail = b"".join(
            (
                _varint(max_attempts),
                _string(target_service),
                _target(target),
                _varint(_ms(lease)),
                _varint(_ms(heartbeat_interval)),
                _varint(_ms(retry.initial_interval)),
                _DOUBLE.pack(retry.multiplier),
                _varint(_ms(retry.max_interval)),
                _DOUBLE.pack(retry.jitter),
            )
        )

    def encode(self, run_id: str, scheduled_for: datetime, due_at: datetime, attempt: int) -> bytes:
        """One run's record; ``run_id`` in its canonical text form (``str(uuid)``)."""
        return b"".join(
            (
                _string(run_id),
                self._job,
                _instant(scheduled_for),
                _instant(due_at),
                _varint(attempt),
                self._tail,
            )
        )


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro int/long at ``pos``: its value and the position after it."""
    byte = data[pos]
    if byte < 0x80:  # one byte: every length and attempt of a run record
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 64 bits")


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = _read_long(data, pos)
    end = pos + length
    if length < 0 or end > len(data):
        raise ValueError("string beyond the record")
    return data[pos:end].decode(), end


#: 8-byte varints read lately -> their value (read_head's instants). Varints are prefix-free,
#: so 8 bytes equal to a whole varint seen before are that varint, whatever follows them.
_INSTANTS: dict[bytes, int] = {}


def _read_instant(data: bytes, pos: int) -> tuple[int, int]:
    """``_read_long`` for an instant in epoch µs (8 bytes from 2001 to 2112), remembered: a
    spike's runs share one scheduled instant, and a steady load's one per second."""
    known = _INSTANTS.get(data[pos : pos + 8])
    if known is not None:
        return known, pos + 8
    value, end = _read_long(data, pos)
    if end - pos == 8:
        if len(_INSTANTS) >= _INSTANTS_MAX:
            _INSTANTS.clear()
        _INSTANTS[data[pos:end]] = value
    return value, end


def read_head(data: bytes) -> tuple[bytes, str, str, int, int, int, int]:
    """The per-run head of a RunEvent record, read by hand: (the run id's text as bytes,
    job_id, tenant, scheduled_for and due_at in epoch microseconds, attempt, and where the job's
    tail starts).

    Validates nothing beyond the head's own encoding: the caller compares the run id with one it
    trusts and knows the tail's bytes from a record the codec decoded whole
    (:mod:`duetime_dispatcher.fast_path`).

    Raises:
        ValueError: the bytes are not such a head (a string beyond the record, a varint too long,
            text that is not UTF-8); IndexError: the record ends inside the head.
    """
    length, pos = _read_long(data, 0)
    end = pos + length
    if length < 0 or end > len(data):
        raise ValueError("string beyond the record")
    run_text = data[pos:end]
    job_id, pos = _read_string(data, end)
    tenant, pos = _read_string(data, pos)
    scheduled_us, pos = _read_instant(data, pos)
    due_us, pos = _read_instant(data, pos)
    attempt, pos = _read_long(data, pos)
    return run_text, job_id, tenant, scheduled_us, due_us, attempt, pos
