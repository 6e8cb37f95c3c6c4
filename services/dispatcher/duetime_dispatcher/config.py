"""The dispatcher's knobs: a frozen config with defaults and validation, and the faust settings.

faust's settings are derived here, in one place, because several of them are load-bearing for
correctness rather than tuning (see :func:`faust_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import ConfigError

__all__ = ["MAX_CLAIM_AHEAD", "DispatcherConfig", "faust_settings"]

#: The most ``claim_ahead`` may be: a worker holds what it claimed ahead in memory, and a worker
#: that dies holding it leaves those runs to their leases (docs/claim-ahead.md).
MAX_CLAIM_AHEAD = timedelta(seconds=60)


@dataclass(frozen=True)
class DispatcherConfig:
    """How the dispatcher batches, sleeps, de-duplicates and reports.

    Attributes:
        max_batch: records taken from the consumer's fetched queue per step (the hot path is
            batched; a step holds the event loop for ~50 us a record, so the release task waits
            at most one step).
        idle_poll: how long the intake sleeps after a poll that found nothing.
        max_sleep: the longest the release loop sleeps between looks at the wheel.
        dedup_window: how long a released (run_id, attempt) still drops copies (see
            :mod:`duetime_dispatcher.holding` for why it is short).
        tick: the timing wheel's resolution (precision is exact regardless).
        prepare_ahead: how long before a run is due the wheel does the work of taking it out
            (cascades, sorting): a midnight spike is sorted a second early, and released at
            midnight by slicing a list. Nothing is released before it is due.
        stage_ahead: how long before a run is due it is taken off the wheel and kept, ready to
            go, in a list of its own (at most ``prepare_ahead``; 0 turns it off). At the due
            instant only the produce calls are left: taking 20k runs off the wheel and making
            their releases took ~20 ms of the 20k spike's first 100 ms (docs/dispatcher.md,
            "Staged ahead"). A staged run still counts as held, and nothing is released early.
        recheck_late: a Kafka-target run read this long or more after its due instant (a
            record read again after a restart, or a backlog) is first looked up in the
            database, one statement per batch; one whose run is already past the record's
            attempt (emitted and recorded before the crash, or run by a worker) is acked
            instead of emitted a second time. None turns the look-up off.
        commit_interval: how often the intake commits the acked prefix of each partition.
        retry_interval: how long after the broker refused a release it is tried again.
        publish_timeout: the longest one release round waits for the broker's acknowledgements;
            above librdkafka's ``message.timeout.ms`` (30 s), so every record gets its report.
        stats_interval: how often the ``dispatcher.stats`` line is written.
        max_hold: the furthest ahead a run may be due and still be held. A run due later is
            logged (``run.too_far``) and acked without being held: held, it would pin its
            partition's committed offset; the planner re-publishes it when it is due.
        max_held: the cap on runs held in memory (environment ``DUETIME_DISPATCHER_MAX_HELD``,
            option ``--max-held``). At the cap the intake pauses its partitions
            (:mod:`duetime_dispatcher.backpressure`); ~4 KB per held run.
        resume_below: the low-water mark at which a paused intake resumes; default 80 % of
            ``max_held``.
        max_pause: how long the intake may stay paused before the runs due last are shed
            (acked unreleased; the planner's sweeper re-publishes them once due), so a run due
            sooner than everything held cannot starve behind them.
        clock_window: how long a database-clock sample counts towards the offset estimate.
        instance: which of several dispatcher processes sharing one data dir this is (each gets
            its own faust directory); they share the due topics' partitions as one group.
        clock_threshold: offset estimates within +/- this are not corrected (on one host the
            estimate is only the smallest transit time).
        clock_warn: offset estimates beyond +/- this are logged as ``clock.skew`` (WARNING).
        clock_probe_interval: how often the database clock is read directly (a tight sample for
            the offset estimate, see :mod:`duetime.clock_offset`).
        record_interval: how often the Kafka fast path's successes are written to PostgreSQL
            (one statement per batch; their source records are acked after the write).
        throttle_interval: how often runs waiting at throttled targets ask PostgreSQL for a
            grant (one statement round for all such targets; none while nothing waits).
        limits_interval: how often the targets' limits and tenants' weights are re-read, so
            ``duetime targets set`` takes effect without a restart.
        claim_ahead: how long before its due instant a run for an HTTP target without limits
            is released to ``runs.ready`` (environment ``DUETIME_DISPATCHER_CLAIM_AHEAD``,
            option ``--claim-ahead``, seconds; 0 turns it off). A worker claims it at once,
            with a lease that counts from the due instant, and starts it at the due instant
            (docs/claim-ahead.md): the database work of a midnight is done before midnight.
            Runs of throttled targets, catch-up runs and Kafka targets are released at their
            due instant.
        stop_grace: the longest a stop may take once it has begun (SIGTERM, SIGINT); then the
            process exits whatever it still waits for (a commit or flush to a broker that is
            gone). Runs not yet acknowledged are read again by the next dispatcher. Below the
            10 s ``duetime up`` grants a service before SIGKILL, so the dispatcher says why.
    """

    max_batch: int = 1000
    idle_poll: timedelta = timedelta(milliseconds=5)
    max_sleep: timedelta = timedelta(milliseconds=50)
    dedup_window: timedelta = timedelta(seconds=60)
    tick: timedelta = timedelta(milliseconds=10)
    prepare_ahead: timedelta = timedelta(seconds=1)
    stage_ahead: timedelta = timedelta(milliseconds=500)
    recheck_late: timedelta | None = timedelta(seconds=1)
    commit_interval: timedelta = timedelta(seconds=1)
    retry_interval: timedelta = timedelta(seconds=1)
    publish_timeout: timedelta = timedelta(seconds=35)
    stats_interval: timedelta = timedelta(seconds=10)
    max_hold: timedelta = timedelta(hours=2)
    max_held: int = 250_000
    instance: int = 0
    resume_below: int | None = None
    max_pause: timedelta = timedelta(seconds=60)
    clock_window: timedelta = timedelta(minutes=5)
    clock_threshold: timedelta = timedelta(milliseconds=50)
    clock_warn: timedelta = timedelta(seconds=1)
    record_interval: timedelta = timedelta(milliseconds=25)
    clock_probe_interval: timedelta = timedelta(seconds=10)
    stop_grace: timedelta = timedelta(seconds=5)
    throttle_interval: timedelta = timedelta(milliseconds=50)
    limits_interval: timedelta = timedelta(seconds=2)
    claim_ahead: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ConfigError("dispatcher max_batch must be at least 1")
        if self.max_held < 2:
            raise ConfigError("dispatcher max_held must be at least 2")
        if self.instance < 0:
            raise ConfigError("dispatcher instance must not be negative")
        if not 0 <= self.low_water < self.max_held:
            raise ConfigError("dispatcher resume_below must be below max_held, not negative")
        if not timedelta(0) <= self.clock_threshold <= self.clock_warn:
            raise ConfigError("dispatcher clock_threshold must be between 0 and clock_warn")
        positive = {
            "idle_poll": self.idle_poll,
            "max_sleep": self.max_sleep,
            "tick": self.tick,
            "commit_interval": self.commit_interval,
            "retry_interval": self.retry_interval,
            "publish_timeout": self.publish_timeout,
            "stats_interval": self.stats_interval,
            "max_hold": self.max_hold,
            "max_pause": self.max_pause,
            "clock_window": self.clock_window,
            "record_interval": self.record_interval,
            "clock_probe_interval": self.clock_probe_interval,
            "stop_grace": self.stop_grace,
            "throttle_interval": self.throttle_interval,
            "limits_interval": self.limits_interval,
        }
        for name, value in positive.items():
            if value <= timedelta(0):
                raise ConfigError(f"dispatcher {name} must be positive")
        if self.dedup_window < timedelta(0):
            raise ConfigError("dispatcher dedup_window must not be negative")
        if self.prepare_ahead < timedelta(0):
            raise ConfigError("dispatcher prepare_ahead must not be negative")
        if not timedelta(0) <= self.stage_ahead <= self.prepare_ahead:
            raise ConfigError("dispatcher stage_ahead must be between 0 and prepare_ahead")
        if self.recheck_late is not None and self.recheck_late < timedelta(0):
            raise ConfigError("dispatcher recheck_late must not be negative")
        if not timedelta(0) <= self.claim_ahead <= MAX_CLAIM_AHEAD:
            raise ConfigError(
                f"dispatcher claim_ahead must be between 0 and {MAX_CLAIM_AHEAD.seconds} s"
            )

    @property
    def low_water(self) -> int:
        """Where a paused intake resumes: ``resume_below``, or 80 % of ``max_held``."""
        if self.resume_below is not None:
            return self.resume_below
        return self.max_held * 4 // 5


def faust_settings(
    settings: Settings, config: DispatcherConfig, catalog: TopicCatalog
) -> dict[str, Any]:
    """Keyword arguments for ``faust.App``.

    faust runs the process (worker, signals, tasks) but starts no Kafka client of its own: the
    intake, the publisher and the recorder have theirs (see ``_ServiceApp`` in
    :mod:`duetime_dispatcher.app`). These settings keep it that way should anything touch faust's
    topics: ``topic_allow_declare=False`` and ``topic_disable_leader=True`` (topics are created
    explicitly at start-up with their partitions; the local broker would auto-create them with
    4), ``processing_guarantee="at_least_once"`` (exactly-once needs Kafka transactions, which
    duetime does not use), no web server and an in-memory store.
    """
    brokers = [f"kafka://{host.strip()}" for host in settings.require_kafka().split(",")]
    return {
        "broker": brokers,
        "processing_guarantee": "at_least_once",
        "topic_partitions": catalog.partitions,
        "topic_allow_declare": False,
        "topic_disable_leader": True,
        "web_enabled": False,
        "store": "memory://",
        "autodiscover": False,
        # Each dispatcher process of one data dir keeps its own faust directory.
        "datadir": str(
            Path(settings.data_dir)
            / ("dispatcher" if config.instance == 0 else f"dispatcher-{config.instance}")
        ),
    }
