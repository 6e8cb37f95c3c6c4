"""Async HTTP targets: the rules shared by the worker and the API's callbacks. Pure.

A target that answers ``202 Accepted`` takes the attempt over (docs/targets.md, "Async
targets"): the worker extends the lease to the job's lease and stops renewing it, and the target
reports through the API, authenticated by the attempt's **callback token**:

- ``POST /v1/runs/{run_id}/attempts/{n}/heartbeat`` renews the lease (the job's lease from now)
  and may carry ``progress``;
- ``POST /v1/runs/{run_id}/attempts/{n}/complete`` ends the attempt: succeeded, or failed
  (retried after the job's backoff, or dead, like any failed attempt).

The callback token is the attempt's lease token, the random value the database fences every
write of the attempt on: the worker sends it in ``X-Duetime-Callback-Token`` with the request
and nowhere else (no topic, no log line, no API answer). Holding it is holding the lease, which
is what a 202 hands over. A call with the token of an attempt that ended, or whose lease expired
and was re-issued, changes nothing and is refused as fenced.

Progress a target reports is kept on the run and sent to the next attempt of the run in
``X-Duetime-Resume``, so a long job can continue where a failed attempt stopped. It travels in a
header, so it is printable ASCII (JSON with ``\\u`` escapes is), at most ``MAX_PROGRESS``
characters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

__all__ = [
    "CALLBACK_TOKEN",
    "MAX_PROGRESS",
    "RESUME",
    "CallbackEnd",
    "callback_end",
    "progress_problem",
]

#: Request header: the attempt's callback token (its lease token); the target sends it back.
CALLBACK_TOKEN = "X-Duetime-Callback-Token"
#: Request header: the progress an earlier attempt of the run reported, when there is some.
RESUME = "X-Duetime-Resume"
#: The longest progress kept (characters); it must fit in a request header.
MAX_PROGRESS = 4096


def progress_problem(progress: str) -> str | None:
    """Why ``progress`` cannot be kept and sent as a header, or None when it can."""
    if len(progress) > MAX_PROGRESS:
        return f"at most {MAX_PROGRESS} characters, not {len(progress)}"
    if any(not " " <= ch <= "~" for ch in progress):
        return "printable ASCII only (it is sent to the next attempt in a header)"
    return None


@dataclass(frozen=True)
class CallbackEnd:
    """What a target's ``complete`` call makes of the run (the arguments of the fenced end).

    Attributes:
        state: ``succeeded``, ``scheduled`` (retried after ``retry_delay``) or ``dead``.
        outcome: What run_attempts records: ``succeeded`` or ``failed``.
        retry_delay: The backoff before the next attempt (zero unless retried).
        error: The target's reason for a failure.
    """

    state: Literal["succeeded", "scheduled", "dead"]
    outcome: Literal["succeeded", "failed"]
    retry_delay: timedelta = timedelta(0)
    error: str | None = None


def callback_end(
    *,
    succeeded: bool,
    retryable: bool,
    error: str | None,
    attempt: int,
    max_attempts: int,
    backoff: timedelta,
) -> CallbackEnd:
    """The run's next state after an async target reported its attempt's end.

    The same rule as a worker's: a retryable failure with attempts left is retried after the
    job's backoff; a final failure, or any failure of the last attempt, makes the run dead.
    """
    if succeeded:
        return CallbackEnd("succeeded", "succeeded")
    reason = error or "the target reported a failure"
    if retryable and attempt < max_attempts:
        return CallbackEnd("scheduled", "failed", max(backoff, timedelta(0)), reason)
    return CallbackEnd("dead", "failed", timedelta(0), reason)
