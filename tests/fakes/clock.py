"""A monotonic clock the test moves by hand: ``clock.now += 5``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ManualClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now
