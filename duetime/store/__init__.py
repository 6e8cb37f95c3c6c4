"""PostgreSQL: migrations, named queries, the store."""

from .migrate import apply_migrations
from .store import Claim, NewRun, Store, Tx

__all__ = ["Claim", "NewRun", "Store", "Tx", "apply_migrations"]
