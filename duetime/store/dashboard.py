"""The web dashboard's reads beyond the REST API's (sql/dashboard.sql), scoped by tenant.

Like ``duetime.store.api``, every function takes ``tenant``: the tenant of the request's token,
or None for an admin token.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from .queries import query

__all__ = ["QueueDepth", "attempts_of_runs", "dead_recent", "queue_depth"]


@dataclass(frozen=True)
class QueueDepth:
    """Runs scheduled and due but not started, scheduled for later, and running."""

    due_waiting: int
    planned_ahead: int
    running: int


def queue_depth(conn: Connection, tenant: str | None) -> QueueDepth:
    row = conn.execute(query("dashboard_queue_depth"), {"tenant": tenant}).one()
    return QueueDepth(int(row.due_waiting), int(row.planned_ahead), int(row.running))


def dead_recent(conn: Connection, tenant: str | None, window_seconds: float) -> int:
    """Dead runs scheduled in the last ``window_seconds``."""
    params = {"tenant": tenant, "window_seconds": window_seconds}
    return int(conn.execute(query("dashboard_dead_recent"), params).one().runs)


def attempts_of_runs(
    conn: Connection, run_ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, Sequence[Any]]:
    """Each run's attempts in order, in one statement. The ids must come from a query scoped
    by the caller's tenant: attempts carry no tenant of their own."""
    ids = list(run_ids)
    found: defaultdict[uuid.UUID, list[Any]] = defaultdict(list)
    if ids:
        for row in conn.execute(query("dashboard_attempts_of_runs"), {"run_ids": ids}):
            found[row.run_id].append(row)
    return dict(found)
