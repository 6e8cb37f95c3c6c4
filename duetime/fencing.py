"""The fencing token a target receives with every execution of a run (``X-Duetime-Fencing-Token``).

A target that must not let a stale execution overwrite a newer one (a worker paused past its
lease, whose request arrives after its successor's) keeps, per run, the highest token it has seen
and rejects a lower one. For that the token must grow with every execution the database hands
out, on every path a run can take. It is derived from the attempt number:

- a **worker's** execution of attempt *n* carries ``2n``. The worker gets *n* back from its claim
  (``runs_claim_batch``), a compare-and-set from ``state = 'scheduled', attempt = n - 1`` to
  ``running, attempt = n``: the database grants each attempt number once per run, in increasing
  order, and nothing ever lowers ``runs.attempt``. A retry (the worker hands the run back as
  ``scheduled``) and a lease the reaper expired both keep *n*; only the next claim raises it. So
  every claim of a run carries a token no earlier claim carried.
- the **dispatcher's** Kafka fast path emits attempt *n* before any database write (that is what
  makes it fast), so it has no claim to ask. It carries ``2n - 1``: above every execution of
  attempt *n - 1* and below a worker's execution of attempt *n*, which is what happens when the
  fast path gives the run up (a failed delivery goes to ``runs.ready``). Its *n* is the one the
  planner wrote into the due record from the run row (the row's attempt + 1), and its emission is
  recorded only while the row still says ``scheduled`` with *n - 1* attempts behind it.

Two executions share a token only when the fast path emits the same attempt again (a dispatcher
restart or a re-published due record before the first emission was recorded): those are copies of
one record, not a newer execution, and a target treats an equal token as a duplicate.

The token is an ordering, not a count: targets compare tokens of one run and never derive the
attempt from them (``X-Duetime-Attempt`` says which attempt it is).

Pure: no driver.
"""

from __future__ import annotations

__all__ = ["claimed_token", "emitted_token"]


def claimed_token(attempt: int) -> int:
    """The token of attempt ``attempt`` executed under a worker's claim."""
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, not {attempt}")
    return 2 * attempt


def emitted_token(attempt: int) -> int:
    """The token of attempt ``attempt`` emitted by the dispatcher's Kafka fast path."""
    return claimed_token(attempt) - 1
