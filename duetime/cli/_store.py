"""The database connection a CLI command uses: one connection, named for pg_stat_activity."""

from __future__ import annotations

from duetime.config import load_settings
from duetime.store import Store

__all__ = ["cli_store"]


def cli_store() -> Store:
    return Store(load_settings().require_database(), pool_size=1, application_name="duetime-cli")
