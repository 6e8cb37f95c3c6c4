"""Condition alerts: measure the pipeline's health, compare with thresholds, raise on transitions.

Three conditions, each one cheap query per check (``check_interval``, 15 s by default):

- ``outbox.backlog``: scheduled runs still unpublished ``outbox_age`` after they were due (the
  planner's outbox is not getting through to the broker). Read through the outbox index.
- ``ready.lag``: records on ``runs.ready`` the workers' group has not committed (workers are
  missing, stuck or too few). Read from the broker: committed offsets and high watermarks.
- ``release.lateness``: the p99 of (first start - due_at) over the first attempts due in the last
  ``lateness_window``, a run not started yet counting as late as it is now. Read through
  ``runs_first_start_idx`` and the outbox and unclaimed indexes.

Each condition's state lives in ``alert_conditions`` and changes only under that row's lock, so
several reapers checking at once raise each transition once. ``duetime.alerts.condition`` says
when a condition fires and resolves; each transition enqueues one alert for the operator's
webhook whose subject is ``<episode>.firing`` or ``<episode>.resolved``. Database measurements use
the database clock, like lease expiry; ``run_once(now)`` takes the clock the hold time runs on.

With several PostgreSQL clusters the runs measurements read every cluster (one query each): the
backlog is the sum of the clusters' (its oldest run the oldest of them all), the lateness the
worst cluster's p99 (a late cluster is late even when the others pull the overall p99 under
the threshold). A cluster that cannot be read fails the measurement, which is then skipped:
half the clusters must not resolve an alert. The conditions' state and the alerts stay in
``store``, the home cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from duetime.alerts import AlertKind, NewAlert, Transition, step
from duetime.alerts.model import Detail
from duetime.bus.lag import ConsumerLag
from duetime.errors import DuetimeError
from duetime.logs import event
from duetime.store import Store, Tx
from duetime.store.alerts import (
    LatenessSample,
    OutboxBacklog,
    alert_condition_lock,
    alert_condition_save,
    alerts_enqueue,
    runs_outbox_backlog,
    runs_release_lateness,
)

from .alert_config import AlertConfig

__all__ = ["ConditionChecks", "LagProbe", "Measurement"]

log = logging.getLogger("duetime.reaper.alerts")

R = TypeVar("R")


class LagProbe(Protocol):
    """The workers' lag on ``runs.ready`` (``duetime.bus.lag.ConsumerLagProbe``)."""

    group: str
    topic: str

    def measure(self) -> ConsumerLag: ...


@dataclass(frozen=True)
class Measurement:
    kind: AlertKind
    value: float
    over: bool
    # (firing summary, resolved summary) and the details both alerts carry.
    summaries: tuple[str, str]
    details: dict[str, Detail]


class ConditionChecks:
    """Measures every enabled condition and raises the alerts of its transitions."""

    def __init__(
        self,
        store: Store,
        config: AlertConfig,
        lag: LagProbe | None = None,
        *,
        clusters: Sequence[Store] = (),
    ) -> None:
        """``store``: the home cluster; ``clusters``: every cluster's (default: ``store``)."""
        self.store = store
        self.run_stores: tuple[Store, ...] = tuple(clusters) or (store,)
        self.config = config
        self.lag = lag
        checks: list[Callable[[], Measurement]] = []
        if config.outbox_backlog is not None:
            checks.append(self.measure_outbox_backlog)
        if config.ready_lag is not None and lag is not None:
            checks.append(self.measure_ready_lag)
        if config.lateness_p99 is not None:
            checks.append(self.measure_release_lateness)
        self._checks = tuple(checks)

    def run_once(self, now: datetime) -> dict[AlertKind, Transition]:
        """One check of every condition at ``now``; returns the transitions it raised.

        A measurement that fails (database or broker unreachable) is logged and skipped: the
        condition keeps its state until a later check can measure it.
        """
        raised: dict[AlertKind, Transition] = {}
        for check in self._checks:
            try:
                measurement = check()
            except DuetimeError as exc:
                event(log, "alert.check_failed", logging.WARNING, check=check.__name__, error=exc)
                continue
            transition = self.apply(measurement, now)
            if transition is not None:
                raised[measurement.kind] = transition
        return raised

    def apply(self, measurement: Measurement, now: datetime) -> Transition | None:
        """Step the condition's state with a measurement; enqueue the alert of a transition."""
        kind = measurement.kind
        with self.store.tx() as tx:
            state = alert_condition_lock(tx, kind)
            new, transition = step(state, measurement.over, now, self.config.hold)
            alert_condition_save(tx, kind, new, measurement.value, now)
            if transition is None:
                return None
            firing = transition is Transition.FIRED
            summary = measurement.summaries[0 if firing else 1]
            alert = NewAlert(
                kind=kind,
                subject=f"{new.episode}.{transition.value}",
                status=transition.value,
                summary=summary,
                details={**measurement.details, "episode": new.episode},
            )
            alerts_enqueue(tx, [alert])
        event(
            log,
            f"alert.{transition.value}",
            logging.ERROR if firing else logging.WARNING,
            kind=kind,
            episode=new.episode,
            value=measurement.value,
            summary=summary,
        )
        return transition

    def _measure_runs(self, query: Callable[[Tx], R]) -> list[R]:
        """``query`` on every cluster, one short transaction each."""
        results: list[R] = []
        for store in self.run_stores:
            with store.tx() as tx:
                results.append(query(tx))
        return results

    def measure_outbox_backlog(self) -> Measurement:
        threshold = self.config.outbox_backlog
        assert threshold is not None
        age = self.config.outbox_age
        backlogs = self._measure_runs(lambda tx: runs_outbox_backlog(tx, age, cap=threshold))
        backlog = OutboxBacklog(
            sum(b.runs for b in backlogs),
            min((b.oldest_due_at for b in backlogs if b.oldest_due_at), default=None),
        )
        seconds = f"{age.total_seconds():g}s"
        oldest = backlog.oldest_due_at.isoformat() if backlog.oldest_due_at else None
        return Measurement(
            AlertKind.OUTBOX_BACKLOG,
            backlog.runs,
            backlog.runs >= threshold,
            (
                f"at least {backlog.runs} scheduled runs are unpublished more than {seconds} "
                "after they were due",
                f"fewer than {threshold} scheduled runs are unpublished {seconds} after due",
            ),
            {
                "runs": backlog.runs,
                "threshold": threshold,
                "age_seconds": age.total_seconds(),
                "oldest_due_at": oldest,
            },
        )

    def measure_ready_lag(self) -> Measurement:
        threshold = self.config.ready_lag
        assert threshold is not None and self.lag is not None
        lag = self.lag.measure()
        total = lag.total
        group, topic = self.lag.group, self.lag.topic
        return Measurement(
            AlertKind.READY_LAG,
            total,
            total >= threshold,
            (
                f"workers' group {group} is {total} records behind on {topic}",
                f"workers' group {group} is {total} records behind on {topic}, under {threshold}",
            ),
            {"records": total, "threshold": threshold, "group": group, "topic": topic},
        )

    def measure_release_lateness(self) -> Measurement:
        threshold = self.config.lateness_p99
        assert threshold is not None
        window = self.config.lateness_window
        most = self.config.lateness_sample
        samples = self._measure_runs(lambda tx: runs_release_lateness(tx, window, most))
        sample = LatenessSample(
            sum(s.runs for s in samples),
            max((s.p99 for s in samples if s.p99 is not None), default=None),
            max((s.worst for s in samples if s.worst is not None), default=None),
        )
        p99 = sample.p99 or timedelta(0)
        seconds = round(p99.total_seconds(), 3)
        limit = threshold.total_seconds()
        return Measurement(
            AlertKind.RELEASE_LATENESS,
            seconds,
            sample.p99 is not None and p99 > threshold,
            (
                f"p99 release lateness {seconds}s over the last {window.total_seconds():g}s "
                f"({sample.runs} runs) exceeds {limit:g}s",
                f"p99 release lateness {seconds}s is back under {limit:g}s",
            ),
            {
                "p99_seconds": seconds,
                "max_seconds": round(sample.worst.total_seconds(), 3) if sample.worst else None,
                "runs": sample.runs,
                "threshold_seconds": limit,
                "window_seconds": window.total_seconds(),
            },
        )
