"""Object keys of the archive: built from dates, hex digests and fixed names only.

A key never carries a job id, a tenant or any other name a user chose: those go *inside* the
objects. So no value from a job definition can steer where an object is written (``../``, an
absolute path, a NUL byte, a 1 KB name). The one configured part, the key prefix
(``DUETIME_S3_PREFIX``), is checked here against the same rules.

Layout under the prefix, one pair of objects per archived day partition::

    runs/day=2026-11-23/<sha256 of the data object>.avro   Avro object container file
    runs/day=2026-11-23/<sha256 of the data object>.json   the manifest (day, rows, checksum,
                                                           the job ids it holds, schema fingerprint)

The data object's name is its own checksum, so archiving the same rows again writes the same
key (an idempotent retry), and a day archived twice (a partition re-created after it was dropped)
adds objects beside the first instead of replacing them.
"""

from __future__ import annotations

import re
from datetime import date

from duetime.errors import ConfigError

__all__ = [
    "ArchiveKeyError",
    "check_prefix",
    "data_key",
    "day_from_key",
    "day_prefix",
    "manifest_key",
    "runs_prefix",
]

_PREFIX_SEGMENT = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_KEY = re.compile(r"runs/day=(\d{4}-\d{2}-\d{2})/([0-9a-f]{64})\.(avro|json)")
_MAX_PREFIX = 200


class ArchiveKeyError(ConfigError):
    """A key part that is not allowed in an archive object key."""


def check_prefix(prefix: str) -> str:
    """The prefix as keys use it (``""`` or ending in ``/``); ``ArchiveKeyError`` if unsafe.

    Allowed: segments of ``a-z 0-9 . _ -`` (not starting with ``.``, ``_`` or ``-``) joined by
    ``/``. Refused: ``..`` and ``.`` segments, a leading ``/``, empty segments, NUL and any other
    character, more than 200 characters.
    """
    if prefix in ("", "/"):
        return ""
    if len(prefix) > _MAX_PREFIX:
        raise ArchiveKeyError(f"archive key prefix longer than {_MAX_PREFIX} characters")
    body = prefix[:-1] if prefix.endswith("/") else prefix
    for segment in body.split("/"):
        if not _PREFIX_SEGMENT.fullmatch(segment) or segment.strip(".") == "":
            raise ArchiveKeyError(
                f"archive key prefix {prefix!r}: each segment must be a-z 0-9 . _ - "
                "(not starting with . _ or -), separated by single /"
            )
    return body + "/"


def runs_prefix(prefix: str) -> str:
    return f"{check_prefix(prefix)}runs/"


def day_prefix(prefix: str, day: date) -> str:
    return f"{runs_prefix(prefix)}day={day.isoformat()}/"


def _name(prefix: str, day: date, digest: str, suffix: str) -> str:
    if not _DIGEST.fullmatch(digest):
        raise ArchiveKeyError("archive object names are 64 lower-case hex digits (a SHA-256)")
    return f"{day_prefix(prefix, day)}{digest}.{suffix}"


def data_key(prefix: str, day: date, digest: str) -> str:
    return _name(prefix, day, digest, "avro")


def manifest_key(prefix: str, day: date, digest: str) -> str:
    return _name(prefix, day, digest, "json")


def day_from_key(prefix: str, key: str) -> tuple[date, str, str] | None:
    """``(day, digest, "avro" | "json")`` of a key this module made, else None (anything else in
    the bucket is ignored, never trusted)."""
    base = runs_prefix(prefix)
    if not key.startswith(base):
        return None
    match = _KEY.fullmatch("runs/" + key[len(base) :])
    if match is None:
        return None
    try:
        day = date.fromisoformat(match.group(1))
    except ValueError:
        return None
    return day, match.group(2), match.group(3)
