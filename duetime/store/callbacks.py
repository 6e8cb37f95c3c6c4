"""An async target's heartbeats and completions through the API (sql/callbacks.sql).

The target authenticates with the attempt's callback token, which is its lease token
(``duetime.async_targets``). Each call is one short transaction: find the attempt by run,
number and token (locking the run), then write under the same compare-and-set as a worker's
renewal or completion. A call of an attempt that lost the run (its lease expired, the run moved
on to another attempt) is **fenced**: nothing changes, and it is recorded in
``run_fenced_completions`` with the worker ``target``, like a worker's fenced completion. A call
after the target itself ended the attempt changes nothing either, but is not a stale holder's and
is not recorded there (that table is the evidence that no stale holder's end was applied). Ends
go through ``complete_batch``, the one statement that ends any attempt.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection

from duetime.async_targets import callback_end
from duetime.schedule import retry_delay

from .attempts import AttemptEnd, complete_batch
from .queries import query
from .rows import retry_from_row

__all__ = [
    "TARGET",
    "CallbackAttempt",
    "CallbackResult",
    "attempts_callback_complete",
    "attempts_callback_heartbeat",
]

#: Who reported, where a fenced call names its worker.
TARGET = "target"
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class CallbackAttempt:
    """Attempt ``attempt`` of a run, named by the target with its callback token."""

    run_id: uuid.UUID
    attempt: int
    token: uuid.UUID


@dataclass(frozen=True)
class CallbackResult:
    """What a call did.

    ``status``: ``ok`` (applied), ``fenced`` (the attempt no longer holds the run: it was
    expired, or the run moved on; recorded), ``ended`` (the target itself already ended the
    attempt, as ``ended_as``; not a stale holder, so not recorded), ``unknown`` (no such attempt
    with this token). ``state`` is the run's state after the call, ``lease_expires_at`` the
    renewed lease (heartbeats). ``repeated``: an ``ok`` completion that an earlier call already
    applied (changing nothing now; not to be counted again).
    """

    status: Literal["ok", "fenced", "ended", "unknown"]
    state: str | None = None
    lease_expires_at: datetime | None = None
    ended_as: str | None = None
    repeated: bool = False


# The outcomes an attempt's holder reports; any other end (lease_expired, handed_back) was not
# the target's doing, and a call after it is a stale holder's.
_REPORTED = ("succeeded", "failed")


def _lookup(conn: Connection, call: CallbackAttempt) -> Any:
    return conn.execute(
        query("attempts_callback_lookup"),
        {"run_id": call.run_id, "attempt": call.attempt, "lease_token": call.token},
    ).one_or_none()


def _fenced(conn: Connection, call: CallbackAttempt, outcome: str) -> None:
    conn.execute(
        query("runs_callback_fenced"),
        {
            "run_id": call.run_id,
            "attempt": call.attempt,
            "worker": TARGET,
            "lease_token": call.token,
            "outcome": outcome,
        },
    )


def _renew(conn: Connection, call: CallbackAttempt, row: Any, progress: str | None) -> Any:
    """The renewed lease's row, or None when the attempt no longer holds the run."""
    return conn.execute(
        query("runs_callback_renew"),
        {
            "run_id": call.run_id,
            "scheduled_for": row.scheduled_for,
            "attempt": call.attempt,
            "lease_token": call.token,
            "lease_ms": row.lease_ms,
            "progress": progress,
        },
    ).one_or_none()


def attempts_callback_heartbeat(
    conn: Connection, call: CallbackAttempt, progress: str | None
) -> CallbackResult:
    """Renew the attempt's lease by the job's lease and keep ``progress`` (None: unchanged)."""
    row = _lookup(conn, call)
    if row is None:
        return CallbackResult("unknown")
    renewed = _renew(conn, call, row, progress)
    if renewed is None:
        if row.attempt_outcome in _REPORTED:
            return CallbackResult("ended", row.state, ended_as=row.attempt_outcome)
        _fenced(conn, call, "heartbeat")
        return CallbackResult("fenced", row.state)
    return CallbackResult("ok", "running", renewed.lease_expires_at)


def attempts_callback_complete(
    conn: Connection,
    call: CallbackAttempt,
    *,
    succeeded: bool,
    retryable: bool,
    error: str | None,
    progress: str | None,
) -> CallbackResult:
    """End the attempt: succeeded, or failed (retried after the job's backoff, or dead).

    A repeated call whose first one was applied (its answer lost) is reported ``ok`` again,
    changing nothing; a different one is ``ended``; a call of an attempt that lost the run is
    ``fenced``.
    """
    row = _lookup(conn, call)
    if row is None:
        return CallbackResult("unknown")
    max_attempts: int = row.max_attempts
    policy = retry_from_row(row, max_attempts)
    end = callback_end(
        succeeded=succeeded,
        retryable=retryable,
        error=error,
        attempt=call.attempt,
        max_attempts=max_attempts,
        backoff=retry_delay(policy, str(call.run_id), call.attempt),
    )
    scheduled_for: datetime = row.scheduled_for
    if not row.holds:
        # Ended already. By the target's own report: the same report again is a call repeated
        # after its answer was lost (accepted, changing nothing), another one contradicts it.
        # Otherwise the attempt lost the run (its lease expired, the run moved on): fenced.
        if row.attempt_outcome in _REPORTED:
            if row.attempt_outcome == end.outcome:
                return CallbackResult("ok", row.state, repeated=True)
            return CallbackResult("ended", row.state, ended_as=row.attempt_outcome)
        _fenced(conn, call, end.outcome)
        return CallbackResult("fenced", row.state)
    if progress is not None:
        _renew(conn, call, row, progress)
    accepted = complete_batch(
        conn,
        TARGET,
        [
            AttemptEnd(
                run_id=call.run_id,
                scheduled_for=scheduled_for,
                attempt=call.attempt,
                lease_token=call.token,
                state=end.state,
                outcome=end.outcome,
                error=end.error,
                retry_delay=end.retry_delay,
            )
        ],
    )
    if call.token not in accepted:  # cannot happen under the lock; recorded by the statement
        return CallbackResult("fenced", row.state)
    return CallbackResult("ok", end.state)
