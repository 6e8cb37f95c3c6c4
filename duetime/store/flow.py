"""Per-target limits in PostgreSQL: grants shared by every dispatcher (sql/flow.sql).

A grant is one short transaction: lock the rows of the targets asked for (and the default
``*``) in a fixed order, refill each bucket by the database clock, count each target's live
in-flight slots, allow a prefix of each request (``duetime.flow.allowed``), spend the tokens and
take the slots. The row lock serialises dispatchers on a target, so the limit is global however
many there are; a dispatcher asks a few times a second per throttled target, never per run.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from duetime.flow import DEFAULT_TARGET, TargetLimit, allowed, refill

from .queries import query
from .rows import batch_json

__all__ = [
    "Candidate",
    "GrantRequest",
    "TargetOverview",
    "forecast_add",
    "forecast_prune",
    "forecast_read",
    "grant",
    "limits",
    "overview",
    "report_waiting",
    "set_limits",
    "unset_limits",
    "weights",
]


@dataclass(frozen=True)
class Candidate:
    """One run a dispatcher would release: ``slot`` when it holds an in-flight slot (a worker
    runs it; a Kafka emission by the dispatcher ends at once and holds none)."""

    run_id: uuid.UUID
    attempt: int
    slot: bool = True


@dataclass(frozen=True)
class GrantRequest:
    target_service: str
    candidates: Sequence[Candidate]


@dataclass(frozen=True)
class TargetOverview:
    target_service: str
    limit: TargetLimit
    in_flight: int
    throttled: int


def _limit(row: Any) -> TargetLimit:
    return TargetLimit(
        rate=None if row.rate_per_second is None else float(row.rate_per_second),
        burst=row.burst,
        max_in_flight=row.max_in_flight,
    )


def limits(conn: Connection) -> dict[str, TargetLimit]:
    """Every target's own limits (missing ones follow ``*``), keyed by name, ``*`` included."""
    return {r.target_service: _limit(r) for r in conn.execute(query("targets_limits")).all()}


def weights(conn: Connection) -> dict[str, int]:
    """Each tenant's fairness weight (tenants without a row weigh 1)."""
    return {r.tenant: int(r.fairness_weight) for r in conn.execute(query("tenants_weights")).all()}


def effective(own: Mapping[str, TargetLimit], target_service: str) -> TargetLimit:
    """A target's limits: its own, each missing one taken from the default ``*``."""
    default = own.get(DEFAULT_TARGET, TargetLimit())
    return own.get(target_service, TargetLimit()).over(default)


def grant(conn: Connection, requests: Sequence[GrantRequest]) -> dict[str, int]:
    """How many of each request's candidates (a prefix, in the order given) may be released."""
    wanted = {r.target_service: r for r in requests if r.candidates}
    if not wanted:
        return {}
    names = sorted(wanted)
    rows = {r.target_service: r for r in conn.execute(query("targets_lock"), {"names": names})}
    default_row = rows.get(DEFAULT_TARGET)
    default = _limit(default_row) if default_row is not None else TargetLimit()
    missing = [n for n in names if n not in rows]
    if missing and default.limited:
        # Limited by the default only: give them a row for their own bucket, then lock it.
        conn.execute(query("targets_adopt"), {"names": missing})
        rows.update(
            {r.target_service: r for r in conn.execute(query("targets_lock"), {"names": missing})}
        )
    granted: dict[str, int] = {}
    limited: dict[str, TargetLimit] = {}
    for name in names:
        row = rows.get(name)
        limit = (_limit(row) if row is not None else TargetLimit()).over(default)
        if row is None or not limit.limited:
            granted[name] = len(wanted[name].candidates)
        else:
            limited[name] = limit
    if not limited:
        return granted
    counted = [n for n, lim in limited.items() if lim.max_in_flight is not None]
    live: dict[str, int] = {}
    if counted:
        conn.execute(query("target_slots_prune"), {"names": counted})
        live = {
            r.target_service: int(r.live)
            for r in conn.execute(query("target_slots_live"), {"names": counted})
        }
    spend: list[dict[str, Any]] = []
    slots: list[dict[str, Any]] = []
    for name, limit in limited.items():
        row = rows[name]
        tokens = refill(limit, row.tokens, row.refilled_at, row.now)
        candidates = wanted[name].candidates
        count = allowed(limit, tokens, live.get(name, 0), len(candidates))
        granted[name] = count
        if limit.rate is not None:
            spend.append(
                {
                    "target_service": name,
                    "tokens": tokens - count,
                    "refilled_at": row.now.isoformat(),
                }
            )
        if limit.max_in_flight is not None:
            slots.extend(
                {"target_service": name, "run_id": str(c.run_id), "attempt": c.attempt}
                for c in candidates[:count]
                if c.slot
            )
    if spend:
        conn.execute(query("targets_spend"), {"rows": batch_json(spend)})
    if slots:
        conn.execute(query("target_slots_take"), {"rows": batch_json(slots)})
    return granted


def forecast_read(
    conn: Connection, names: Sequence[str], first: int, last: int
) -> dict[tuple[str, int], int]:
    """Runs planned per (target, epoch second) in [first, last] for ``names``."""
    rows = conn.execute(
        query("target_forecast_read"), {"names": list(names), "first": first, "last": last}
    )
    return {(r.target_service, int(r.second)): int(r.runs) for r in rows}


def forecast_add(conn: Connection, added: Mapping[tuple[str, int], int]) -> None:
    """Add runs to the forecast, one statement."""
    rows = [{"target_service": t, "second": s, "runs": n} for (t, s), n in added.items() if n]
    if rows:
        conn.execute(query("target_forecast_add"), {"rows": batch_json(rows)})


def forecast_prune(conn: Connection, before: int) -> None:
    conn.execute(query("target_forecast_prune"), {"before": before})


def report_waiting(conn: Connection, dispatcher: str, waiting: Mapping[str, int]) -> None:
    """Record what ``dispatcher`` holds back per target now (for ``duetime targets list``)."""
    rows = [{"target_service": t, "waiting": n} for t, n in waiting.items() if n > 0]
    conn.execute(
        query("target_waiting_report"), {"dispatcher": dispatcher, "rows": batch_json(rows)}
    )


def set_limits(
    conn: Connection,
    name: str,
    *,
    rate: float | None = None,
    burst: int | None = None,
    max_in_flight: int | None = None,
) -> TargetLimit:
    """Create or change a target's limits (the options given; the others are kept)."""
    row = conn.execute(
        query("targets_set"),
        {"name": name, "rate": rate, "burst": burst, "max_in_flight": max_in_flight},
    ).one()
    return _limit(row)


def unset_limits(conn: Connection, name: str) -> bool:
    """Remove a target's own limits (it follows the default again); False if it had none."""
    return conn.execute(query("targets_unset"), {"name": name}).first() is not None


def overview(conn: Connection, fresh_seconds: float = 10.0) -> list[TargetOverview]:
    rows = conn.execute(query("targets_overview"), {"fresh_seconds": fresh_seconds}).all()
    return [
        TargetOverview(r.target_service, _limit(r), int(r.in_flight), int(r.throttled))
        for r in rows
    ]
