"""The worker's local lease deadline and heartbeat period."""

from __future__ import annotations

from datetime import timedelta

import pytest

from duetime_workers.lease import LeaseClock, effective_heartbeat_interval, lease_margin


@pytest.mark.parametrize(
    ("lease", "margin"),
    [
        (timedelta(seconds=60), timedelta(seconds=6)),
        (timedelta(seconds=3), timedelta(milliseconds=500)),
        (timedelta(milliseconds=600), timedelta(milliseconds=300)),  # never more than half
    ],
)
def test_margin(lease: timedelta, margin: timedelta) -> None:
    assert lease_margin(lease) == margin


def test_deadline_counts_from_when_the_renewal_was_sent() -> None:
    clock = LeaseClock.start(timedelta(seconds=60), sent_at=100.0)
    assert clock.deadline == 154.0
    assert not clock.expired(153.9)
    assert clock.expired(154.0)
    clock.renewed(120.0)
    assert clock.deadline == 174.0
    clock.renewed(110.0)  # a late answer to an older renewal never moves the deadline back
    assert clock.deadline == 174.0
    assert clock.remaining(170.0) == pytest.approx(4.0)


def test_default_heartbeat_interval_is_kept() -> None:
    lease = timedelta(seconds=60)
    assert effective_heartbeat_interval(lease, timedelta(seconds=20)) == timedelta(seconds=20)


@pytest.mark.parametrize("requested", [timedelta(seconds=59), timedelta(0), timedelta(-1)])
def test_a_heartbeat_that_cannot_keep_the_lease_is_shortened(requested: timedelta) -> None:
    lease = timedelta(seconds=60)
    assert effective_heartbeat_interval(lease, requested) == timedelta(seconds=27)
