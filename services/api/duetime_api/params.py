"""Checks of query and path parameters that pydantic's types do not make.

Text reaches PostgreSQL only as bound parameters, so these are not about injection: a NUL byte
cannot be stored in a text value at all (the driver would fail, a 5xx), and a bad name is
better answered with its field than looked up.
"""

from __future__ import annotations

from typing import Any

from duetime.errors import InvalidInput, NotFound
from duetime.jobdef import JOB_ID_PATTERN, TENANT_PATTERN

__all__ = ["check_strings", "job_id_param", "tenant_param", "text_param"]

_MAX_DEPTH = 64


def _storable(value: str, field: str) -> None:
    """PostgreSQL stores neither NUL nor a lone UTF-16 surrogate (which JSON's \\ud800 can
    carry): either would fail in the driver, so it is refused here, with its field."""
    if "\x00" in value:
        raise InvalidInput(field, "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(field, "is not valid Unicode (a lone surrogate)") from exc


def check_strings(value: Any, field: str, depth: int = 0) -> None:
    """Every string of a JSON document, keys too, is storable text; the field names the first
    that is not, in the job-file notation (``job.target.http.body``). Job validation refuses a
    lone surrogate in its fields too, with the same message; a NUL in a body or a Kafka value
    only PostgreSQL would refuse, without naming the field, and an answer that quotes a key
    cannot carry a lone surrogate at all, hence this walk before it."""
    if depth > _MAX_DEPTH:
        raise InvalidInput(field, f"is nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        _storable(value, field)
    elif isinstance(value, dict):
        for key, item in value.items():
            _storable(str(key), field)
            check_strings(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_strings(item, f"{field}[{index}]", depth + 1)


def text_param(value: str | None, field: str, max_length: int = 200) -> str | None:
    if value is None or value == "":
        return None
    _storable(value, field)
    if len(value) > max_length:
        raise InvalidInput(field, f"is longer than {max_length} characters")
    return value


def tenant_param(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not TENANT_PATTERN.match(value):
        raise InvalidInput(
            "tenant", "use 1-63 characters from a-z 0-9 _ - (first: letter or digit)"
        )
    return value


def job_id_param(value: str) -> str:
    """A path's job id; one that no job can have is simply not found."""
    if not JOB_ID_PATTERN.match(value):
        raise NotFound(f"no job {value[:200]!r}")
    return value
