"""One scenario of the spike benchmark, end to end, on a fresh ``duetime up``.

``spike``: N one-off jobs all due at the same instant T, applied through the project's bulk path
(``jobs_apply`` in one ``Store.tx()``, as ``duetime jobs apply`` does). T is chosen after timing a
rolled-back apply of a sample, so that the apply finishes and the planner still gets its whole
default lookahead (plus a margin) before T.

``steady``: K interval jobs (``PT1S``), so K runs fall due every second; after a warm-up the
window of ``duration`` seconds is measured, then the jobs are paused and the window's runs drain.

``throttled``: a spike at one target limited to ``limit`` runs/s (``duetime targets set``), with
a large tenant (N jobs) and a small one (10 jobs) due at the same instant: the observed rate
against the limit, and how late the small tenant's runs start (tenant fairness).

All measure handler starts at a target in its own process, releases from the broker's record
timestamps, and the outcome in PostgreSQL. See bench/bench_spike.py for the command line.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench.spike_db import (
    insert_future_jobs,
    pause_jobs,
    run_figures,
    runs_unfinished,
    succeeded_between,
)
from bench.spike_measure import duplicates, first_starts, percentiles, release_lateness, timeline
from bench.spike_recorder import Arrival, Recorder
from bench.spike_release import read_releases
from bench.spike_system import DuetimeUp
from duetime.bus.kafka import create_topics
from duetime.bus.topics import TopicCatalog, TopicSpec
from duetime.config import Settings
from duetime.jobdef import parse_jobs
from duetime.model import run_id_for
from duetime.store import Store, flow
from duetime.store.jobs import jobs_apply
from duetime_planner.config import PlannerConfig

__all__ = ["TARGET_TOPIC", "ScenarioConfig", "run_scenario"]

TARGET_TOPIC = "bench.target"
THROTTLED_TARGET = "bench-throttled"
_SAMPLE = 1000


@dataclass(frozen=True)
class ScenarioConfig:
    scenario: str  # spike | steady
    target: str  # kafka | http
    n: int  # spike: jobs due at T; steady: runs due per second (interval jobs)
    future_jobs: int = 0
    duration: float = 60.0  # steady: the measured window (s)
    # steady: from the end of the apply to the window (s); covers the planner's first
    # lookahead (30 s of runs materialized at once) so the window sees the steady state.
    warmup: float = 30.0
    lead: float | None = None  # spike: T - end of apply; default planner lookahead + 10 s
    # After T (spike) or the window's end (steady); None: 90 s for a spike, 60 s for steady.
    drain_timeout: float | None = None
    fetch_wait_ms: int = 10  # the Kafka target consumer's fetch.wait.max.ms
    keep_dir: Path | None = None  # keep logs and data here instead of a temporary directory
    limit: float = 1000.0  # throttled: the target's rate limit (runs/s)
    small: int = 10  # throttled: the small tenant's jobs
    # steady: the jobs' runs spread evenly over each second (each job's interval anchored at
    # its own millisecond) instead of all due on the whole second: releases never pause.
    spread: bool = False


def _sleep_until(instant: float) -> None:
    # Wall-clock instants throughout: the benchmark, its targets and the stack share one clock.
    while (left := instant - time.time()) > 0:
        time.sleep(min(left, 0.5))


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _jobs(
    config: ScenarioConfig, prefix: str, schedule: dict[str, str], port: int | None
) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{i:07d}",
            "tenant": f"t{i % 10}",
            "schedule": schedule,
            "target": _target(config, port, f"{prefix}{i:07d}"),
        }
        for i in range(config.n)
    ]


def _target(config: ScenarioConfig, port: int | None, job_id: str) -> dict[str, Any]:
    if config.target == "http":
        return {"http": {"url": f"http://127.0.0.1:{port}/run"}}
    return {"kafka": {"topic": TARGET_TOPIC, "key": job_id, "value": f'{{"job":"{job_id}"}}'}}


class _Rollback(Exception):
    pass


def _apply(store: Store, documents: list[dict[str, Any]], *, keep: bool) -> float:
    """Validate and apply the documents in one transaction; seconds taken. keep=False rolls back."""
    started = time.monotonic()
    try:
        with store.tx() as tx:
            jobs_apply(tx, parse_jobs(documents))
            if not keep:
                raise _Rollback
    except _Rollback:
        pass
    return time.monotonic() - started


def _partitions(settings: Settings) -> int:
    """The partitions the running system gave ``runs.ready`` (the project's choice).

    Lists all topics: a metadata request naming a topic that does not exist yet would make the
    embedded broker auto-create it with 4 partitions, under the services' feet."""
    catalog = TopicCatalog(settings.topic_prefix)
    admin = AdminClient({"bootstrap.servers": settings.require_kafka()})
    topics = admin.list_topics(timeout=30).topics
    found = topics.get(catalog.ready)
    return len(found.partitions) if found is not None and found.partitions else catalog.partitions


def run_scenario(config: ScenarioConfig) -> dict[str, Any]:
    """Start the system, run the scenario, stop everything; the result object."""
    work = config.keep_dir or Path(tempfile.mkdtemp(prefix="duetime-spike-"))
    work.mkdir(parents=True, exist_ok=True)
    up = DuetimeUp(work / "data", work / "up.log")
    recorder: Recorder | None = None
    store: Store | None = None
    result: dict[str, Any] = {}
    notes: list[str] = []
    started = time.monotonic()
    try:
        up.start()
        up.wait_ready(300)
        settings = up.settings()
        store = Store(settings.require_database(), pool_size=2, application_name="bench-spike")
        # The services create their topics at start-up: wait for them to join first.
        joined_s = up.wait_joined(quiet=3.0, timeout=60.0)
        if joined_s >= 60.0:
            notes.append("consumer joins not seen in the service logs; waited 60 s instead")
        partitions = _partitions(settings)
        out = work / "arrivals.tsv"
        if config.target == "kafka":
            create_topics(settings, [TopicSpec(TARGET_TOPIC, partitions)])
            argv = ["bench.spike_kafka_target", settings.require_kafka(), TARGET_TOPIC]
            recorder = Recorder(
                "kafka-target", [*argv, str(config.fetch_wait_ms)], out, work / "target.log"
            )
        else:
            recorder = Recorder(
                "http-target", ["bench.spike_http_target"], out, work / "target.log"
            )
        recorder.wait_ready(60)
        future_s = None
        if config.future_jobs:
            future_s = insert_future_jobs(
                store, config.future_jobs, _target(config, recorder.port, "future")
            )
        run = _steady if config.scenario == "steady" else _spike
        result = run(config, settings, store, recorder, notes)
        result.update(
            {
                "future_insert_s": None if future_s is None else round(future_s, 1),
                "join_wait_s": round(joined_s, 1),
                "partitions": partitions,
            }
        )
    finally:
        if recorder is not None:
            recorder.kill()
        if store is not None:
            store.close()
        clean = up.stop()
        if not clean:
            notes.append("duetime up did not stop cleanly; its processes were killed")
        if config.keep_dir is None and clean and os.environ.get("DUETIME_BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            notes.append(f"logs kept in {work}")
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["notes"] = notes
    result["config"] = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    return result


def _base(config: ScenarioConfig) -> dict[str, Any]:
    base = {
        "scenario": config.scenario,
        "target": config.target,
        "n": config.n,
        "future_jobs": config.future_jobs,
    }
    if config.spread:
        base["due"] = "spread over each second"
    return base


def _spike(
    config: ScenarioConfig, settings: Settings, store: Store, recorder: Recorder, notes: list[str]
) -> dict[str, Any]:
    prefix = "spike-"
    throttled = config.scenario == "throttled"
    # Time a sample (rolled back) to know how far ahead T must be for the apply to fit.
    sample = _jobs(
        ScenarioConfig(config.scenario, config.target, min(config.n, _SAMPLE)),
        "sample-",
        {"at": "2100-01-01T00:00:00Z"},
        recorder.port,
    )
    per_job = _apply(store, sample, keep=False) / len(sample)
    lead = (
        config.lead
        if config.lead is not None
        else (PlannerConfig().lookahead.total_seconds() + 10.0)
    )
    due = math.ceil(time.time() + per_job * config.n * 1.5 + 2.0 + lead)
    documents = _jobs(config, prefix, {"at": _utc(due).isoformat()}, recorder.port)
    expected = config.n
    small_ids: set[str] = set()
    if throttled:
        with store.tx() as tx:
            flow.set_limits(tx.conn, THROTTLED_TARGET, rate=config.limit)
        small = [
            {**d, "id": f"{prefix}small-{i:03d}", "tenant": "small"}
            for i, d in enumerate(documents[: config.small])
        ]
        documents = [{**d, "tenant": "large"} for d in documents] + small
        documents = [{**d, "target_service": THROTTLED_TARGET} for d in documents]
        small_ids = {str(run_id_for(d["id"], _utc(due))) for d in small}
        expected += config.small
    apply_started = time.time()
    apply_s = _apply(store, documents, keep=True)
    applied_at = time.time()
    if applied_at > due - lead / 2:
        notes.append(f"the apply ended only {due - applied_at:.1f}s before T (estimated wrong)")
    drain_timeout = 90.0 if config.drain_timeout is None else config.drain_timeout
    if throttled and config.drain_timeout is None:
        drain_timeout += expected / config.limit * 1.5
    reached = recorder.wait_count(expected, due + drain_timeout)
    if not reached:
        notes.append(f"not every run started within the drain timeout ({drain_timeout:.0f}s)")
    recorder.wait_quiet(1.0, time.time() + 5.0)  # late duplicates
    _wait_finished(store, prefix, _utc(due + 1), time.time() + 30.0, notes)
    arrivals = recorder.stop()
    figures = run_figures(store, prefix, _utc(due), _utc(due + 1))
    result = _base(config)
    result.update(
        _lateness(arrivals, settings, due, due, due + 1, expected, bin_s=0.1, notes=notes)
        | {"last_start_after_t_s": _last_start(arrivals, due, due + 1, due)}
    )
    if throttled:
        result["throttle"] = _throttle_figures(arrivals, due, config.limit, small_ids)
    last_finished = figures.pop("last_finished_at")
    result.update(
        {
            "runs_per_s": None,
            "planned_ahead_s": figures.pop("planned_ahead_s"),
            "apply_s": round(apply_s, 2),
            "apply_started_before_t_s": round(due - apply_started, 1),
            "applied_before_t_s": round(due - applied_at, 1),
            "drain_s": None if last_finished is None else round(last_finished - due, 2),
            "db": figures,
            "t": _utc(due).isoformat(),
        }
    )
    _check_succeeded(figures, expected, notes)
    return result


def _throttle_figures(
    arrivals: list[Arrival], due: float, limit: float, small_ids: set[str]
) -> dict[str, Any]:
    """The observed rate against the limit, and the small tenant's start lateness."""
    starts = first_starts([a for a in arrivals if due <= a.scheduled_for < due + 1])
    times = sorted(a.arrived_at for a in starts.values())
    most = 0
    ahead = 0
    for i, t in enumerate(times):  # the most starts in any 1 s window
        while ahead < len(times) and times[ahead] < t + 1.0:
            ahead += 1
        most = max(most, ahead - i)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    small = [(a.arrived_at - a.scheduled_for) * 1000 for r, a in starts.items() if r in small_ids]
    burst = max(1, math.ceil(limit))  # the default burst: one second's worth
    return {
        "limit_per_s": limit,
        "burst": burst,
        # A token bucket allows burst + limit x t in any t seconds: at most burst + limit in 1 s.
        "observed_max_per_s": most,
        "observed_mean_per_s": round((len(times) - 1) / span, 1) if span else None,
        # The rate once the initial burst is spent: what the limit governs.
        "sustained_per_s": round((len(times) - burst) / span, 1)
        if span and len(times) > burst
        else None,
        "small_tenant_started": len(small),
        "small_tenant_start_lateness_ms": percentiles(small),
    }


def _steady(
    config: ScenarioConfig, settings: Settings, store: Store, recorder: Recorder, notes: list[str]
) -> dict[str, Any]:
    prefix = "steady-"
    documents = _jobs(config, prefix, {"interval": "PT1S"}, recorder.port)
    if config.spread:
        for i, document in enumerate(documents):
            offset_ms = i * 1000 // config.n
            document["schedule"] = {
                "interval": "PT1S",
                "start_at": f"2026-01-01T00:00:00.{offset_ms:03d}Z",
            }
    apply_s = _apply(store, documents, keep=True)
    window_start = math.ceil(time.time() + config.warmup)
    window_end = window_start + config.duration
    _sleep_until(window_end)
    pause_jobs(store, prefix)
    drain_timeout = 60.0 if config.drain_timeout is None else config.drain_timeout
    _wait_finished(store, prefix, _utc(window_end), window_end + drain_timeout, notes)
    recorder.wait_quiet(1.0, time.time() + 5.0)
    arrivals = recorder.stop()
    figures = run_figures(store, prefix, _utc(window_start), _utc(window_end))
    expected = config.n * math.ceil(config.duration)
    result = _base(config)
    result.update(
        _lateness(
            arrivals,
            settings,
            window_start,
            window_start,
            window_end,
            expected,
            bin_s=1.0,
            notes=notes,
        )
        # For the steady window, "T" of the last start is the window's last slot.
        | {"last_start_after_t_s": _last_start(arrivals, window_start, window_end, window_end - 1)}
    )
    succeeded = succeeded_between(store, prefix, _utc(window_start), _utc(window_end))
    started_in_window = sum(1 for a in arrivals if window_start <= a.arrived_at < window_end)
    last_finished = figures.pop("last_finished_at")
    result.update(
        {
            "runs_per_s": round(succeeded / config.duration, 1),
            "starts_per_s": round(started_in_window / config.duration, 1),
            "planned_ahead_s": figures.pop("planned_ahead_s"),
            "apply_s": round(apply_s, 2),
            "window_s": config.duration,
            "warmup_s": config.warmup,
            "expected_runs": expected,
            "drain_s": None if last_finished is None else round(last_finished - window_end, 2),
            "db": figures,
            "t": _utc(window_start).isoformat(),
        }
    )
    _check_succeeded(figures, expected, notes)
    return result


def _wait_finished(
    store: Store, prefix: str, before: datetime, deadline: float, notes: list[str]
) -> None:
    while time.time() < deadline:
        if runs_unfinished(store, prefix, before) == 0:
            return
        time.sleep(1.0)
    notes.append("runs still scheduled or running in PostgreSQL at the end of the drain")


def _check_succeeded(figures: dict[str, Any], expected: int, notes: list[str]) -> None:
    states: dict[str, int] = figures["states"]
    succeeded = states.get("succeeded", 0)
    if succeeded != expected:
        others = ", ".join(f"{k}={v}" for k, v in sorted(states.items()) if k != "succeeded")
        notes.append(
            f"{succeeded} of {expected} expected runs succeeded in PostgreSQL"
            + (f" (others: {others})" if others else "")
        )


def _lateness(
    arrivals: list[Arrival],
    settings: Settings,
    origin: float,
    start: float,
    end: float,
    expected: int,
    *,
    bin_s: float,
    notes: list[str],
) -> dict[str, Any]:
    """Start and release lateness, lost and duplicates, for runs scheduled in [start, end)."""
    mine = [a for a in arrivals if start <= a.scheduled_for < end]
    starts = first_starts(mine)
    start_ms = [(a.arrived_at - a.scheduled_for) * 1000 for a in starts.values()]
    emit_ms = [
        (a.created_at - a.scheduled_for) * 1000 for a in starts.values() if a.created_at is not None
    ]
    ready = TopicCatalog(settings.topic_prefix).ready
    releases, ready_records = read_releases(settings, ready, start, end)
    release_ms, from_ready, from_target = release_lateness(starts, releases)
    if len(starts) > expected:
        notes.append(f"{len(starts) - expected} more distinct runs started than expected")
    return {
        "start_lateness_ms": percentiles(start_ms),
        "release_lateness_ms": percentiles(release_ms),
        "lost": max(0, expected - len(starts)),
        "duplicates": duplicates(mine),
        "started": len(starts),
        "handler_starts": len(mine),
        "emit_lateness_ms": percentiles(emit_ms),
        "releases_from_ready": from_ready,
        "releases_direct": from_target,
        "ready_records": ready_records,
        "timeline_bin_s": bin_s,
        "timeline": timeline(starts.values(), origin, bin_s),
    }


def _last_start(arrivals: list[Arrival], start: float, end: float, slot: float) -> float | None:
    """Seconds from ``slot`` to the first start of the last run (scheduled in [start, end))."""
    starts = first_starts(a for a in arrivals if start <= a.scheduled_for < end)
    last = max((a.arrived_at for a in starts.values()), default=None)
    return None if last is None else round(last - slot, 3)
