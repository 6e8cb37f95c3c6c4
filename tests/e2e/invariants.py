"""The invariants every fault test checks afterwards by SQL.

The fault tests name them by number:

- I1: each occurrence, minus those the catch-up policy skips, has exactly one run.
- I2: every run reaches a terminal state once the faults have healed.
- I3: no completion from a fenced attempt is accepted.
- I4: at most one planner writes for a shard at any moment (the shard fence).
- I5: no attempt beyond ``max_attempts``; ``dead`` only after the last one.
- I6: lateness stays bounded (within a lease TTL and a scan period after a takeover).
- I7: every outbox row is published, and marked so only on an acknowledgement. A planning
  round's runs are inserted marked, provisionally, with a ``run_publications`` row: the mark
  holds only once that row is gone, deleted after the acknowledgements (the runs the broker did
  not acknowledge unmarked first) or recovered by another planner (its runs unmarked).
- I8: every target request carries its run and attempt; duplicates differ only in attempt.
- I9: a target's concurrency limit is never exceeded, counting zombies.
- I10: no acknowledged API write is lost.
- I11: catch-up after an outage follows each job's policy (once, all, skip).
- I12: the jobs-topic consumer gets past poison records, which land in ``jobs.rejected``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from .pipeline import TERMINAL, Pipeline

__all__ = ["check_runs"]


def check_runs(pipe: Pipeline, run_ids: Sequence[str | uuid.UUID]) -> list[Any]:
    """I2, I5 and I3 over the given runs; returns their rows.

    - I2: every run is terminal.
    - I5: no attempt beyond ``max_attempts``, on the run or in its attempts.
    - I3: an accepted completion (outcome succeeded/failed) only ever from the run's current
      attempt, and never from a lease the database had fenced.
    """
    ids = [run if isinstance(run, uuid.UUID) else uuid.UUID(run) for run in run_ids]
    runs = pipe.sql("SELECT * FROM runs WHERE run_id = ANY(:r)", r=ids)
    assert len(runs) == len(ids)
    assert all(r.state in TERMINAL for r in runs), runs
    assert all(r.attempt <= r.max_attempts for r in runs), runs
    beyond = pipe.sql(
        "SELECT a.run_id, a.attempt FROM run_attempts a JOIN runs r USING (run_id, scheduled_for) "
        "WHERE a.run_id = ANY(:r) AND a.attempt > r.max_attempts",
        r=ids,
    )
    assert not beyond, beyond
    stale = pipe.sql(
        "SELECT a.run_id, a.attempt FROM run_attempts a JOIN runs r USING (run_id, scheduled_for) "
        "WHERE a.run_id = ANY(:r) AND a.outcome IN ('succeeded', 'failed') "
        "AND a.attempt <> r.attempt",
        r=ids,
    )
    assert not stale, stale
    accepted_fenced = pipe.sql(
        "SELECT f.run_id FROM run_fenced_completions f JOIN run_attempts a "
        "ON a.run_id = f.run_id AND a.attempt = f.attempt AND a.lease_token = f.lease_token "
        "WHERE f.run_id = ANY(:r) AND a.outcome IN ('succeeded', 'failed')",
        r=ids,
    )
    assert not accepted_fenced, accepted_fenced
    return runs
