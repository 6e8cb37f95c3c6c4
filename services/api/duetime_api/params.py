"""Checks of query and path parameters that pydantic's types do not make.

Text reaches PostgreSQL only as bound parameters, so these are not about injection: a NUL byte
cannot be stored in a text value at all (the driver would fail, a 5xx), and a bad name is
better answered with its field than looked up.
"""

from __future__ import annotations

from duetime.errors import InvalidInput, NotFound
from duetime.jobdef import JOB_ID_PATTERN, TENANT_PATTERN

__all__ = ["job_id_param", "tenant_param", "text_param"]


def text_param(value: str | None, field: str, max_length: int = 200) -> str | None:
    if value is None or value == "":
        return None
    if "\x00" in value:
        raise InvalidInput(field, "contains a NUL character")
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
