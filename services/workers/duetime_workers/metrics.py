"""The worker's Prometheus metrics (docs/metrics.md), counted per claim and completion statement.

The counts come from the batch statements' results (``count_claims``, ``count_ends``), once per
statement, never once per run. With several worker processes the supervisor serves the merged
counters (prometheus-client multiprocess mode, ``processes``): the in-flight gauge is summed over
the live processes.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from duetime.metrics import RUN_END_METRICS
from duetime.store import AttemptEnd

__all__ = ["WorkerMetrics"]

HANDED_BACK = "handed_back"
FENCED = "fenced"


# What a completion counts as -> (metric, help).
_END_COUNTERS = {
    **RUN_END_METRICS,
    "running": (
        "duetime_runs_handed_to_target",
        "Attempts an async target accepted (202); the target completes them through the API",
    ),
    HANDED_BACK: (
        "duetime_runs_handed_back",
        "Attempts handed back at a worker's stop (their runs due again at once)",
    ),
}


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.started = Counter(
            "duetime_runs_started", "Attempts claimed (leased) by a worker", registry=registry
        )
        self._ends = {
            key: Counter(name, text, registry=registry)
            for key, (name, text) in _END_COUNTERS.items()
        }
        self.in_flight = Gauge(
            "duetime_runs_in_flight",
            "Attempts executing in the worker processes now",
            registry=registry,
            multiprocess_mode="livesum",
        )

    def count_claims(self, claimed: int) -> None:
        if claimed:
            self.started.inc(claimed)

    def count_ends(self, ends: Sequence[AttemptEnd], accepted: Sequence[bool]) -> None:
        """One completion statement's results: ``accepted[i]`` says whether ``ends[i]`` was."""
        kinds = [
            HANDED_BACK if end.outcome == HANDED_BACK else end.state
            for end, ok in zip(ends, accepted, strict=True)
            if ok
        ]
        tally = Tally(kinds)
        tally[FENCED] = len(ends) - len(kinds)
        for key, count in tally.items():
            counter = self._ends.get(key)
            if counter is not None:
                counter.inc(count)
