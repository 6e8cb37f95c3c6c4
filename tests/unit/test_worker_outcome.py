"""HTTP outcome classification, Retry-After parsing, and the retry-or-dead decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from duetime_workers.decision import decide
from duetime_workers.outcome import (
    MAX_RETRY_AFTER,
    AttemptOutcome,
    OutcomeKind,
    final,
    http_outcome,
    parse_retry_after,
    retryable,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (200, OutcomeKind.SUCCEEDED),
        (201, OutcomeKind.SUCCEEDED),
        (204, OutcomeKind.SUCCEEDED),
        (299, OutcomeKind.SUCCEEDED),
        (301, OutcomeKind.FINAL),
        (302, OutcomeKind.FINAL),
        (307, OutcomeKind.FINAL),
        (400, OutcomeKind.FINAL),
        (401, OutcomeKind.FINAL),
        (404, OutcomeKind.FINAL),
        (409, OutcomeKind.FINAL),
        (422, OutcomeKind.FINAL),
        (408, OutcomeKind.RETRYABLE),
        (429, OutcomeKind.RETRYABLE),
        (500, OutcomeKind.RETRYABLE),
        (502, OutcomeKind.RETRYABLE),
        (503, OutcomeKind.RETRYABLE),
        (504, OutcomeKind.RETRYABLE),
        (101, OutcomeKind.FINAL),
        (600, OutcomeKind.FINAL),
    ],
)
def test_status_classification(status: int, kind: OutcomeKind) -> None:
    outcome = http_outcome(status, "Reason", None, NOW)
    assert outcome.kind is kind
    assert outcome.status_code == status
    assert (outcome.error is None) == (kind is OutcomeKind.SUCCEEDED)


def test_redirect_error_says_it_was_not_followed() -> None:
    outcome = http_outcome(302, "Found", None, NOW)
    assert outcome.error == "HTTP 302 Found: redirects are not followed"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", timedelta(seconds=120)),
        ("0", timedelta(0)),
        (" 5 ", timedelta(seconds=5)),
        ("Sun, 01 Mar 2026 12:02:00 GMT", timedelta(minutes=2)),
        ("Sunday, 01-Mar-26 12:00:30 GMT", timedelta(seconds=30)),  # RFC 850 form
        ("Sun, 01 Mar 2026 11:00:00 GMT", timedelta(0)),  # in the past: now
        ("99999999999999999999", MAX_RETRY_AFTER),  # capped
        ("Sun, 01 Mar 2027 12:00:00 GMT", MAX_RETRY_AFTER),  # a year away: capped
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("١٢٠", None),  # non-ASCII digits are not delta-seconds
    ],
)
def test_parse_retry_after(value: str | None, expected: timedelta | None) -> None:
    assert parse_retry_after(value, NOW) == expected


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured_on_429_and_503(status: int) -> None:
    outcome = http_outcome(status, "", "30", NOW)
    assert outcome.kind is OutcomeKind.RETRYABLE
    assert outcome.retry_after == timedelta(seconds=30)


@pytest.mark.parametrize("status", [500, 502, 408])
def test_retry_after_is_ignored_elsewhere(status: int) -> None:
    assert http_outcome(status, "", "30", NOW).retry_after is None


BACKOFF = timedelta(seconds=2)


def test_success_completes_as_succeeded() -> None:
    done = decide(AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=200), 1, 3, BACKOFF)
    assert (done.state, done.outcome, done.status_code) == ("succeeded", "succeeded", 200)
    assert done.retry_delay == timedelta(0)


def test_retryable_failure_with_attempts_left_is_retried_after_backoff() -> None:
    done = decide(retryable("HTTP 500", 500), 1, 3, BACKOFF)
    assert (done.state, done.outcome, done.retry_delay) == ("scheduled", "failed", BACKOFF)
    assert (done.error, done.status_code) == ("HTTP 500", 500)


def test_retryable_failure_on_the_last_attempt_is_dead() -> None:
    done = decide(retryable("timed out"), 3, 3, BACKOFF)
    assert (done.state, done.outcome, done.error) == ("dead", "failed", "timed out")


def test_final_failure_is_dead_even_with_attempts_left() -> None:
    done = decide(final("HTTP 400 Bad Request", 400), 1, 5, BACKOFF)
    assert (done.state, done.status_code) == ("dead", 400)


def test_single_attempt_job_never_retries() -> None:
    assert decide(retryable("HTTP 503", 503), 1, 1, BACKOFF).state == "dead"


def test_retry_after_is_a_lower_bound_not_a_shortcut() -> None:
    longer = AttemptOutcome(OutcomeKind.RETRYABLE, "HTTP 429", 429, timedelta(seconds=90))
    shorter = AttemptOutcome(OutcomeKind.RETRYABLE, "HTTP 429", 429, timedelta(seconds=1))
    assert decide(longer, 1, 3, BACKOFF).retry_delay == timedelta(seconds=90)
    assert decide(shorter, 1, 3, BACKOFF).retry_delay == BACKOFF
