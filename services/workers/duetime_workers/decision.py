"""Retry or dead: what the run becomes after an attempt. Pure.

The worker decides this itself (instead of leaving every failure to the reaper) because it knows
things the reaper cannot: whether the failure is worth retrying, and how long the target asked it
to wait (``Retry-After``). The decision is applied by the fenced ``runs_complete``, so a worker that
lost its lease cannot impose it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from .outcome import AttemptOutcome, OutcomeKind

__all__ = ["Completion", "decide", "hand_back"]

CompletedState = Literal["succeeded", "scheduled", "dead", "running"]


@dataclass(frozen=True)
class Completion:
    """The arguments of ``runs_complete`` for one finished attempt.

    Attributes:
        state: ``succeeded``; ``scheduled`` (retry after ``retry_delay``); ``dead``; or
            ``running``: handed over to an async target that answered 202, which completes it
            through the API (the attempt keeps its lease token, the lease is renewed once).
        outcome: How the attempt went (``succeeded``, ``failed``, ``handed_back`` by a
            stopping worker, or ``accepted`` by an async target), stored on run_attempts
            (``accepted`` is not: the attempt is still running).
        retry_delay: How long before the next attempt becomes due (zero unless retrying).
        error: Why the attempt failed (None on success).
        status_code: The HTTP status, when there was one.
    """

    state: CompletedState
    outcome: Literal["succeeded", "failed", "handed_back", "accepted"]
    retry_delay: timedelta = timedelta(0)
    error: str | None = None
    status_code: int | None = None


def decide(
    outcome: AttemptOutcome, attempt: int, max_attempts: int, backoff: timedelta
) -> Completion:
    """Turn an attempt's outcome into the run's next state.

    Args:
        outcome: What executing the target came to.
        attempt: The attempt that just ran (1 for the first).
        max_attempts: The job's limit; the run is dead after this many failed attempts.
        backoff: The retry policy's delay before attempt ``attempt + 1``.

    A retryable failure with attempts left is retried after ``max(backoff, Retry-After)``: the
    target's request is a lower bound, never a reason to retry sooner. A 202 hands the attempt
    over to the target (``running``), whatever attempt it is. A final failure, or a
    retryable one on the last attempt, makes the run dead, so nothing loops forever.
    """
    if outcome.kind is OutcomeKind.SUCCEEDED:
        return Completion(state="succeeded", outcome="succeeded", status_code=outcome.status_code)
    if outcome.kind is OutcomeKind.ACCEPTED:
        return Completion(state="running", outcome="accepted", status_code=outcome.status_code)
    if outcome.kind is OutcomeKind.RETRYABLE and attempt < max_attempts:
        delay = max(backoff, outcome.retry_after or timedelta(0), timedelta(0))
        return Completion(
            state="scheduled",
            outcome="failed",
            retry_delay=delay,
            error=outcome.error,
            status_code=outcome.status_code,
        )
    return Completion(
        state="dead", outcome="failed", error=outcome.error, status_code=outcome.status_code
    )


def hand_back(attempt: int, max_attempts: int) -> Completion:
    """End an attempt the worker stopped before it finished (docs/workers.md, "Stopping").

    The attempt counts: its number is spent (a later attempt must carry a higher number, the
    fencing rule of docs/targets.md), and the target may have seen it. With attempts left the run
    is due again at once, with no backoff, because nothing failed. On the last attempt the run is
    dead, as the reaper would make it when the lease lapsed, only sooner.
    """
    error = "worker stopped during the attempt"
    if attempt < max_attempts:
        return Completion(state="scheduled", outcome="handed_back", error=error)
    return Completion(state="dead", outcome="handed_back", error=error)
