"""The alert queue port: what the alert sender needs from storage.

``duetime.store.alerts.PgAlertQueue`` implements it on PostgreSQL; tests/fakes/alert_queue.py in
memory. One contract suite (tests/integration/test_alert_queue_contract.py) runs against both.
Times are the caller's clock, passed in, so the rules can be tested without waiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from .model import AlertOutcome, ClaimedAlert

__all__ = ["AlertQueue"]


class AlertQueue(Protocol):
    def alerts_claim(self, now: datetime, limit: int, lease: timedelta) -> list[ClaimedAlert]:
        """Claim up to ``limit`` pending alerts due at ``now`` (never-tried ones first).

        Each claim counts an attempt and hides the alert from other claims until ``now + lease``,
        when it is due again (the sender that claimed it died or hung): delivery is
        at-least-once. Claiming holds no lock once it returns.
        """
        ...

    def alerts_finish(self, outcomes: Sequence[AlertOutcome]) -> set[int]:
        """Record outcomes; returns the alert ids recorded. An outcome for an attempt that is no
        longer the alert's latest (it was claimed again after its lease ran out) is ignored."""
        ...

    def alerts_prune(self, before: datetime) -> int:
        """Delete finished alerts created before ``before``; returns how many."""
        ...
