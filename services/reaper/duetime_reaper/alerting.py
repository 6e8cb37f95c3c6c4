"""The alert sender and the condition checks, on a thread and an event loop of their own.

The reaper's loop (lease expiry, dead runs) only ever enqueues alerts in its own short
transactions; everything that waits on a webhook or on the broker for a measurement runs here.
So a hung webhook or an unreachable broker delays alerts, never lease expiry. Blocking database
and broker calls run in worker threads (``asyncio.to_thread``) so they do not stall deliveries
in flight.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from duetime.aio import wait_event
from duetime.bus.lag import ConsumerLagProbe
from duetime.bus.topics import TopicCatalog
from duetime.config import Settings
from duetime.errors import DuetimeError
from duetime.logs import event
from duetime.store import Store
from duetime.store.alerts import PgAlertQueue

from .alert_config import AlertConfig
from .alert_sender import AlertSender, utc_now
from .conditions import ConditionChecks

__all__ = ["Alerting", "make_alerting"]

log = logging.getLogger("duetime.reaper.alerts")

_PRUNE_INTERVAL = timedelta(hours=1)
_ERROR_PAUSE = 2.0


class Alerting:
    """Runs ``sender`` continuously and ``checks`` every ``check_interval`` until stopped."""

    def __init__(
        self,
        sender: AlertSender,
        checks: ConditionChecks | None,
        *,
        clock: Callable[[], datetime] = utc_now,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.sender = sender
        self.checks = checks
        self._on_stop = on_stop
        self.config = sender.config
        self.clock = clock
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="duetime-alerts", daemon=True)
        self._thread.start()
        self._ready.wait()

    def stop(self, timeout: float = 3.0) -> None:
        """Stop both loops (a delivery in flight is abandoned; its claim runs out and another
        round sends it again) and wait for the thread, at most ``timeout`` seconds: a blocking
        call it waits on (a broker that does not answer a lag probe) must not hold the reaper's
        stop past its grace. The thread is a daemon; what it still does dies with the process."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                event(log, "alerts.stop_abandoned", logging.WARNING, waited_s=timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._ready.set()  # start() must not wait forever if the loop never came up

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._ready.set()
        tasks = [asyncio.create_task(self._send_loop(), name="alert-sender")]
        if self.checks is not None:
            tasks.append(asyncio.create_task(self._check_loop(), name="alert-checks"))
        try:
            await self._stopping.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.sender.aclose()
            if self._on_stop is not None:
                self._on_stop()

    def _stopped(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the stop comes first (``wait_event``: a stop that
        also cancels the loops is not swallowed; both loops test the stop themselves too)."""
        assert self._stopping is not None
        await wait_event(self._stopping, seconds)

    async def _send_loop(self) -> None:
        pruned_at: datetime | None = None
        while not self._stopped():
            now = self.clock()
            try:
                if pruned_at is None or now - pruned_at >= _PRUNE_INTERVAL:
                    pruned = await self.sender.prune(now)
                    pruned_at = now
                    if pruned:
                        event(log, "alert.pruned", alerts=pruned)
                stats = await self.sender.run_once(now)
            except DuetimeError as exc:
                event(log, "alert.round_failed", logging.ERROR, error=exc)
                await self._pause(_ERROR_PAUSE)
                continue
            if stats.claimed < self.config.batch_size:
                await self._pause(self.config.poll_interval.total_seconds())

    async def _check_loop(self) -> None:
        assert self.checks is not None
        checks = self.checks
        while not self._stopped():
            try:
                await asyncio.to_thread(checks.run_once, self.clock())
            except DuetimeError as exc:
                event(log, "alert.check_round_failed", logging.ERROR, error=exc)
            await self._pause(self.config.check_interval.total_seconds())


def make_alerting(
    settings: Settings, store: Store, config: AlertConfig, *, clusters: Sequence[Store] = ()
) -> Alerting:
    """The reaper's alerting: the sender over the PostgreSQL queue of ``store`` (the home
    cluster), and the condition checks (runs measured on every one of ``clusters``) with the
    workers' lag on ``runs.ready`` read from the broker."""
    catalog = TopicCatalog(settings.topic_prefix)
    lag = ConsumerLagProbe(settings, catalog.workers_group, catalog.ready)
    sender = AlertSender(PgAlertQueue(store), config)
    if not config.secret:
        event(log, "alert.unsigned", logging.WARNING, hint="set DUETIME_ALERT_SECRET")
    if not config.webhook:
        event(log, "alert.no_webhook", hint="only tenants with a webhook get alert deliveries")
    checks = ConditionChecks(store, config, lag, clusters=clusters)
    return Alerting(sender, checks, on_stop=lag.close)
