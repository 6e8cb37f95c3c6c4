"""PostgreSQL: migrations, named queries, the store."""

from .attempts import AttemptEnd, Claim, ClaimRequest, LeaseRenewal
from .migrate import apply_migrations
from .store import Ledger, NewRun, OccurrenceGap, ShardFence, ShardOwnerRow, Store, Tx

__all__ = [
    "AttemptEnd",
    "Claim",
    "ClaimRequest",
    "LeaseRenewal",
    "Ledger",
    "NewRun",
    "OccurrenceGap",
    "ShardFence",
    "ShardOwnerRow",
    "Store",
    "Tx",
    "apply_migrations",
]
