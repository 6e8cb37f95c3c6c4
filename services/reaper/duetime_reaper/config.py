"""Reaper settings (alert settings: ``alert_config``).

Environment (command-line options override it):

====================================  =====================================================
``DUETIME_REAPER_SCAN_INTERVAL``      seconds between safety-net scans of expired leases (30)
====================================  =====================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from duetime.errors import ConfigError

__all__ = ["ReaperConfig"]


@dataclass(frozen=True)
class ReaperConfig:
    """The reaper's settings.

    Attributes:
        tick_interval: How often dead runs are looked for (alert + ``runs.dead``).
        batch_size: Leases per expiry statement, dead runs per round.
        publish_timeout: How long the dead records' acknowledgements are awaited.
        scan_interval: How often the database is scanned for expired leases whatever the
            stream showed: the safety net for attempts whose heartbeats the broker lost.
        expiry_grace: How long after a lease's announced expiry the database is asked about it,
            so that the error of the reaper's estimate of the database clock does not make it
            ask too early. Expiry itself is always judged by the database clock.
        recheck_interval: The shortest wait before asking again about a lease the database
            still holds.
        commit_interval: How often the consumer commits the offsets it may commit.
        poll_timeout: The longest a consumer poll waits for records.
        clock_interval: How often the database clock is read to correct the estimate of it.
        ended_memory: How many ended attempts are remembered against heartbeats read late.
    """

    tick_interval: timedelta = timedelta(milliseconds=500)
    batch_size: int = 500
    publish_timeout: timedelta = timedelta(seconds=10)
    scan_interval: timedelta = timedelta(seconds=30)
    expiry_grace: timedelta = timedelta(milliseconds=200)
    recheck_interval: timedelta = timedelta(milliseconds=500)
    commit_interval: timedelta = timedelta(seconds=1)
    poll_timeout: timedelta = timedelta(milliseconds=500)
    clock_interval: timedelta = timedelta(seconds=30)
    ended_memory: int = 100_000

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("reaper batch size must be at least 1")
        positive = (
            "tick_interval",
            "scan_interval",
            "recheck_interval",
            "commit_interval",
            "poll_timeout",
            "clock_interval",
        )
        for name in positive:
            if getattr(self, name) <= timedelta(0):
                raise ConfigError(f"reaper {name} must be positive")
        if self.expiry_grace < timedelta(0):
            raise ConfigError("reaper expiry_grace must not be negative")
        if self.ended_memory < 1:
            raise ConfigError("reaper ended_memory must be at least 1")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReaperConfig:
        values = os.environ if env is None else env
        raw = values.get("DUETIME_REAPER_SCAN_INTERVAL", "").strip()
        if not raw:
            return cls()
        return cls(scan_interval=parse_seconds("DUETIME_REAPER_SCAN_INTERVAL", raw))


def parse_seconds(name: str, raw: str) -> timedelta:
    try:
        seconds = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}") from None
    if not 0 < seconds < 10**9:
        raise ConfigError(f"{name} must be a positive number of seconds, not {raw!r}")
    return timedelta(seconds=seconds)
