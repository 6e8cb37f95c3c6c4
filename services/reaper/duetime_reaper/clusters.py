"""The reaper over several PostgreSQL clusters: every pass once per cluster, each on its own.

A run lives in the cluster of its job's shard (``duetime.shard_map``), so the safety-net scan,
the dead runs and the archive go through every cluster in turn, one pass (and its own short
transactions) per cluster. A cluster that fails is logged (``reaper.cluster_failed``) and the
others go on; only when every cluster failed does the pass fail as a whole, which is what the
service's loop already handles (log, pause, try again) and exactly what one cluster did before.

The lease stream's checks carry no job id (a heartbeat names the run, not its job), so
``ClusterJudge`` asks every cluster about a batch: one statement per cluster per batch, and a
run is found in exactly one of them. Checks a failing cluster might hold are looked at again
later, never assumed gone.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from duetime.errors import DuetimeError
from duetime.logs import event
from duetime.store.leases import LeaseCheck

from .expiry import ExpiryCounts, Judgement
from .watcher import LeaseJudge

__all__ = ["ClusterJudge", "each_cluster"]

log = logging.getLogger("duetime.reaper")

T = TypeVar("T")
R = TypeVar("R")


def each_cluster(step: str, parts: Sequence[T], run: Callable[[T], R]) -> list[R]:
    """``run(part)`` for each cluster's part, in cluster order; the results of the clusters that
    did not fail. A failure is logged and the next cluster goes on; if every cluster failed,
    the last error is raised."""
    if len(parts) == 1:
        return [run(parts[0])]  # one cluster: its error is the pass's, as it always was
    results: list[R] = []
    error: DuetimeError | None = None
    for cluster, part in enumerate(parts):
        try:
            results.append(run(part))
        except DuetimeError as exc:
            error = exc
            event(
                log, "reaper.cluster_failed", logging.ERROR, step=step, cluster=cluster, error=exc
            )
    if error is not None and not results:
        raise error
    return results


class ClusterJudge:
    """A ``LeaseJudge`` asking every cluster's judge about each batch and merging the answers."""

    def __init__(self, judges: Sequence[LeaseJudge]) -> None:
        self.judges = judges

    def judge(self, checks: Sequence[LeaseCheck]) -> Judgement:
        answers = each_cluster("judge", self.judges, lambda judge: judge.judge(checks))
        ended: set[tuple[uuid.UUID, int]] = set()
        alive: dict[tuple[uuid.UUID, int], datetime] = {}
        locked: set[tuple[uuid.UUID, int]] = set()
        counts = ExpiryCounts()
        for answer in answers:
            ended |= answer.ended
            alive.update(answer.alive)
            locked |= answer.locked_expired
            counts += answer.counts
        if len(answers) < len(self.judges):
            # A cluster did not answer: what no answer mentions may be its run, still running.
            # Looked at again (as ``locked_expired`` are), never taken for ended.
            asked = {(check.run_id, check.attempt) for check in checks}
            locked |= asked - ended - alive.keys()
        return Judgement(
            ended=frozenset(ended), alive=alive, locked_expired=frozenset(locked), counts=counts
        )
