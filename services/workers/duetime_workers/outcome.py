"""What one attempt's execution came to, and how an HTTP response is classified.

The classification is the part of the contract targets rely on (docs/targets.md):

- 202: the target took the attempt over (an async target, ``duetime.async_targets``): the run
  stays running under its lease, and the target completes it through the API.
- other 2xx: success.
- 3xx: failure, not retried. Redirects are never followed, because following one would send the
  request (and its headers) to an address the SSRF guard never checked; a moved endpoint is a
  configuration error that retrying cannot fix.
- 408 and 429: retryable (the target asks to be called again later).
- other 4xx: final; the request itself is wrong and an identical retry would fail the same way.
- 5xx, network errors and timeouts: retryable.
- ``Retry-After`` on 429 and 503 (seconds or an HTTP date) is a lower bound for the retry delay.

Everything here is pure: no clock is read (the caller passes ``now``), no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from enum import StrEnum

__all__ = [
    "MAX_RETRY_AFTER",
    "AttemptOutcome",
    "OutcomeKind",
    "final",
    "http_outcome",
    "parse_retry_after",
    "retryable",
]

# A target that answers "Retry-After: 31536000" must not park a run for a year; beyond this the
# run is retried at the cap and the target can push back again.
MAX_RETRY_AFTER = timedelta(hours=24)

_RETRY_AFTER_STATUSES = frozenset({429, 503})
_RETRYABLE_4XX = frozenset({408, 429})


class OutcomeKind(StrEnum):
    SUCCEEDED = "succeeded"
    ACCEPTED = "accepted"  # 202: the target goes on with it and reports through the API
    RETRYABLE = "retryable"  # worth another attempt (if attempts remain)
    FINAL = "final"  # failed, and another attempt would fail the same way


@dataclass(frozen=True)
class AttemptOutcome:
    """The result of executing a target once, before any retry-or-dead decision.

    Attributes:
        kind: Success, a retryable failure or a final failure.
        error: A short, log-safe description of the failure (None on success).
        status_code: The HTTP status, when the target answered.
        retry_after: The delay the target asked for (429/503 ``Retry-After``), if any.
    """

    kind: OutcomeKind
    error: str | None = None
    status_code: int | None = None
    retry_after: timedelta | None = None

    @property
    def succeeded(self) -> bool:
        return self.kind is OutcomeKind.SUCCEEDED


def retryable(error: str, status_code: int | None = None) -> AttemptOutcome:
    return AttemptOutcome(OutcomeKind.RETRYABLE, error=error, status_code=status_code)


def final(error: str, status_code: int | None = None) -> AttemptOutcome:
    return AttemptOutcome(OutcomeKind.FINAL, error=error, status_code=status_code)


def parse_retry_after(value: str | None, now: datetime) -> timedelta | None:
    """Parse a ``Retry-After`` value (RFC 9110 §10.2.3) into a delay from ``now``.

    Accepts delta-seconds (``120``) or an HTTP date (``Wed, 21 Oct 2015 07:28:00 GMT``). A date in
    the past means "now" (zero); anything unparsable is ignored (None) rather than trusted, and the
    result is capped at ``MAX_RETRY_AFTER``.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        # int() of a huge digit string is fine in Python; cap before building a timedelta.
        seconds = min(int(text), int(MAX_RETRY_AFTER.total_seconds()))
        return timedelta(seconds=seconds)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP dates are always GMT
        when = when.replace(tzinfo=UTC)
    delay = when - now
    return min(max(delay, timedelta(0)), MAX_RETRY_AFTER)


def http_outcome(
    status: int, reason: str, retry_after: str | None, now: datetime
) -> AttemptOutcome:
    """Classify an HTTP response status (see the module docstring for the rules)."""
    label = f"HTTP {status} {reason}".rstrip()
    if status == 202:
        return AttemptOutcome(OutcomeKind.ACCEPTED, status_code=status)
    if 200 <= status <= 299:
        return AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=status)
    if 300 <= status <= 399:
        return final(f"{label}: redirects are not followed", status)
    delay = parse_retry_after(retry_after, now) if status in _RETRY_AFTER_STATUSES else None
    if status in _RETRYABLE_4XX or 500 <= status <= 599:
        return AttemptOutcome(
            OutcomeKind.RETRYABLE, error=label, status_code=status, retry_after=delay
        )
    if 400 <= status <= 499:
        return final(label, status)
    # 1xx as a final answer, or a status outside 100-599: the target is not speaking HTTP sanely.
    return final(f"{label}: unexpected status", status)
