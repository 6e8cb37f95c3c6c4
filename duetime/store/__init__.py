"""PostgreSQL: migrations, named queries, the store."""

from .attempts import (
    DEFERRED,
    AttemptEnd,
    Claim,
    ClaimDeferred,
    ClaimRequest,
    LeaseRenewal,
    Unclaim,
)
from .migrate import apply_migrations
from .store import InsertedRuns, Ledger, NewRun, OccurrenceGap, ShardFence, ShardOwnerRow, Store, Tx

__all__ = [
    "DEFERRED",
    "AttemptEnd",
    "Claim",
    "ClaimDeferred",
    "ClaimRequest",
    "InsertedRuns",
    "LeaseRenewal",
    "Ledger",
    "NewRun",
    "OccurrenceGap",
    "ShardFence",
    "ShardOwnerRow",
    "Store",
    "Tx",
    "Unclaim",
    "apply_migrations",
]
