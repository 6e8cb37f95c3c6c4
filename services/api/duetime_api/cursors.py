"""Opaque page cursors: the last key of a page, URL-safe base64 of a small JSON document.

A cursor names a position, not a row set: pages read after writes skip nothing that existed
before and never repeat a row. A cursor that does not decode is a 400 naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from typing import Any

from duetime.errors import InvalidInput

__all__ = ["decode_job_cursor", "decode_run_cursor", "encode_cursor"]


def encode_cursor(value: list[Any]) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode(cursor: str) -> Any:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise InvalidInput("cursor", "is not a cursor this API gave out") from exc


def decode_job_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    value = _decode(cursor)
    if not (isinstance(value, list) and len(value) == 1 and isinstance(value[0], str)):
        raise InvalidInput("cursor", "is not a cursor this API gave out")
    return value[0]


def decode_run_cursor(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    if cursor is None:
        return None
    value = _decode(cursor)
    try:
        if not (isinstance(value, list) and len(value) == 2):
            raise ValueError(value)
        moment = datetime.fromisoformat(value[0])
        if moment.tzinfo is None:
            raise ValueError(value)
        return moment, uuid.UUID(value[1])
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidInput("cursor", "is not a cursor this API gave out") from exc
