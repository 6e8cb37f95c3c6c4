"""Reaper settings (alert settings: ``alert_config``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = ["ReaperConfig"]


@dataclass(frozen=True)
class ReaperConfig:
    tick_interval: timedelta = timedelta(milliseconds=500)
    batch_size: int = 500
    publish_timeout: timedelta = timedelta(seconds=10)
