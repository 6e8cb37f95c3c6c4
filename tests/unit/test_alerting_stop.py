"""The alerting thread stops at once: neither loop goes round again after the stop.

On Python 3.11 ``asyncio.wait_for`` swallows a cancellation that arrives in the step its inner
wait completes; the stop sets the event the loops pause on and cancels them in that same step.
The loops then kept going, measuring the conditions back to back until the reaper abandoned
the thread. These tests count the rounds made after the stop.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from duetime_reaper.alert_config import AlertConfig
from duetime_reaper.alert_sender import AlertSender, SendStats
from duetime_reaper.alerting import Alerting
from duetime_reaper.conditions import ConditionChecks


class _Sender:
    """Stands in for AlertSender: nothing to send, counts its rounds."""

    def __init__(self, config: AlertConfig) -> None:
        self.config = config
        self.rounds = 0
        self.closed = False

    async def prune(self, now: datetime) -> int:
        return 0

    async def run_once(self, now: datetime | None = None) -> SendStats:
        self.rounds += 1
        return SendStats()

    async def aclose(self) -> None:
        self.closed = True


class _Checks:
    """Stands in for ConditionChecks: counts its rounds (each takes a few milliseconds)."""

    def __init__(self) -> None:
        self.rounds = 0
        self.first = threading.Event()

    def run_once(self, now: datetime) -> dict[Any, Any]:
        self.rounds += 1
        self.first.set()
        time.sleep(0.005)
        return {}


def _alerting(sender: _Sender, checks: _Checks | None) -> Alerting:
    return Alerting(
        cast(AlertSender, sender),
        cast(ConditionChecks, checks),
        clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_no_round_of_either_loop_after_the_stop() -> None:
    config = AlertConfig(poll_interval=timedelta(minutes=1), check_interval=timedelta(minutes=1))
    sender, checks = _Sender(config), _Checks()
    alerting = _alerting(sender, checks)
    alerting.start()
    assert checks.first.wait(5)
    deadline = time.monotonic() + 5
    while sender.rounds < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sender.rounds == 1
    # Both loops are now paused for a minute: the stop must end them, not wake them.
    alerting.stop(timeout=5)
    assert alerting._thread is not None and not alerting._thread.is_alive()
    assert (sender.rounds, checks.rounds) == (1, 1)
    assert sender.closed


def test_a_stop_during_a_check_round_ends_the_loop_after_that_round() -> None:
    config = AlertConfig(poll_interval=timedelta(minutes=1), check_interval=timedelta(minutes=1))
    sender = _Sender(config)
    release = threading.Event()

    class _SlowChecks(_Checks):
        def run_once(self, now: datetime) -> dict[Any, Any]:
            self.rounds += 1
            self.first.set()
            release.wait(5)
            return {}

    checks = _SlowChecks()
    alerting = _alerting(sender, checks)
    alerting.start()
    assert checks.first.wait(5)
    stopper = threading.Thread(target=alerting.stop, kwargs={"timeout": 5})
    stopper.start()
    time.sleep(0.05)
    release.set()  # the round in flight finishes; no other starts
    stopper.join(10)
    assert alerting._thread is not None and not alerting._thread.is_alive()
    assert checks.rounds == 1
