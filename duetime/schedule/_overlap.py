"""Overlap policy: what to do with a new run while the job's previous run is still running.

* ``allow``: start it; runs of the job may overlap.
* ``skip``: drop it while any run is running (the occurrence's run record ends as skipped).
* ``buffer_one``: keep at most one run waiting and start it when the running one ends; a new
  run that finds one already buffered is dropped, so a slow job never builds a backlog.
"""

from __future__ import annotations

from typing import Literal, get_args

from duetime.errors import ScheduleError
from duetime.schedule._types import OverlapPolicy

__all__ = ["OverlapDecision", "overlap_decision"]

OverlapDecision = Literal["start", "skip", "buffer"]
_POLICIES = frozenset(get_args(OverlapPolicy))


def overlap_decision(policy: OverlapPolicy, running: int, buffered: int) -> OverlapDecision:
    """Decide what a new run of a job does, given its running and buffered runs.

    Args:
        policy: The job's overlap policy.
        running: How many runs of the job are running now.
        buffered: How many runs of the job are waiting for the running ones to end.

    Raises:
        ScheduleError: For an unknown policy; ValueError for negative counts.
    """
    if policy not in _POLICIES:
        raise ScheduleError("overlap", f"{policy!r} is not one of allow, skip, buffer_one")
    if running < 0 or buffered < 0:
        raise ValueError(f"counts must not be negative (running={running}, buffered={buffered})")
    if policy == "allow":
        return "start"
    if policy == "skip":
        return "skip" if running else "start"
    if buffered:
        return "skip"
    return "buffer" if running else "start"
