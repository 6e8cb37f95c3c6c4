"""Per-target throttling through real dispatchers, broker and PostgreSQL: the rate holds across
two dispatchers, and a small tenant is not stuck behind a large one at a throttled target."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from duetime.bus.records import RUN_EVENTS
from duetime.config import Settings
from duetime.model import RunEvent
from duetime.store import Store, flow
from tests.integration import test_dispatcher as base
from tests.integration.test_dispatcher import (
    DispatcherProcess,
    Publisher,
    ReadyReader,
    new_run,
    wait_for,
)

# The dispatcher tests' fixtures: a prefixed topic set, dispatcher processes, a runs.ready reader.
settings = base.settings
dispatchers = base.dispatchers
ready = base.ready

pytestmark = pytest.mark.integration


def _limit(settings: Settings, name: str, **limits: float | int) -> None:
    store = Store(settings.database_url, pool_size=1)
    try:
        with store.tx() as tx:
            flow.set_limits(tx.conn, name, **limits)  # type: ignore[arg-type]
    finally:
        store.close()


def _publish(publisher: Publisher, runs: list[RunEvent]) -> None:
    for run in runs:
        publisher.send("10s", RUN_EVENTS.encode(run), str(run.run_id).encode())
    publisher.flush()


def test_two_dispatchers_keep_one_rate_limit(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    _limit(settings, "billing-api", rate=40.0, burst=10)
    first, second = dispatchers(), dispatchers()
    for process in (first, second):
        process.wait_event("dispatcher.started")
    wait_for(
        lambda: (
            bool(first.events("partitions.assigned")) and bool(second.events("partitions.assigned"))
        ),
        "both dispatchers joined",
    )
    due = datetime.now(UTC) + timedelta(seconds=2)
    runs = [new_run(due) for _ in range(200)]
    unlimited = [new_run(due, target_service="free-api") for _ in range(50)]
    _publish(Publisher(settings), runs + unlimited)
    wait_for(lambda: len(ready.arrivals) >= 250, "every run released", timeout=60)
    arrivals = list(ready.arrivals)
    by_run = Counter(a.key for a in arrivals)
    assert all(n == 1 for n in by_run.values()) and len(by_run) == 250
    limited = sorted(
        a.created_ms for a in arrivals if a.run and a.run.target_service == "billing-api"
    )
    free = [a for a in arrivals if a.run and a.run.target_service == "free-api"]
    # The unlimited target is not held back by the throttled one.
    assert max(a.arrived_at for a in free) - due < timedelta(seconds=2)
    # At most rate x window + burst in any window, across both dispatchers together.
    for window_ms in (1000, 2000):
        most = max(sum(1 for t in limited if start <= t < start + window_ms) for start in limited)
        assert most <= 40 * window_ms / 1000 + 10 + 2, (window_ms, most)
    assert (limited[-1] - limited[0]) / 1000 >= (200 - 10) / 40 - 0.5
    # Both dispatchers released some (one limit shared, not one each).
    assert first.events("runs.released") and second.events("runs.released")


def test_a_small_tenant_is_not_stuck_behind_a_large_one(
    settings: Settings,
    dispatchers: Callable[..., DispatcherProcess],
    ready: ReadyReader,
) -> None:
    _limit(settings, "billing-api", rate=100.0, burst=20)
    dispatcher = dispatchers()
    dispatcher.wait_event("partitions.assigned")
    due = datetime.now(UTC) + timedelta(seconds=2)
    large = [replace(new_run(due), tenant="large") for _ in range(1500)]
    small = [replace(new_run(due), tenant="small") for _ in range(10)]
    _publish(Publisher(settings), large + small)
    wait_for(
        lambda: sum(1 for a in list(ready.arrivals) if a.run and a.run.tenant == "small") >= 10,
        "the small tenant's runs",
        timeout=30,
    )
    small_arrivals = [a for a in list(ready.arrivals) if a.run and a.run.tenant == "small"]
    assert max(a.arrived_at for a in small_arrivals) - due <= timedelta(seconds=1)
    # Meanwhile the large tenant is still draining at the target's rate.
    released_large = sum(1 for a in list(ready.arrivals) if a.run and a.run.tenant == "large")
    assert released_large < 1500
