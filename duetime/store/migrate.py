"""Versioned SQL migrations: numbered files in duetime/store/migrations, applied in order, once.

Each file runs in its own transaction together with its row in ``duetime_schema_migrations``; a
transaction-level advisory lock serialises concurrent migrators (two services starting at once).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from duetime.errors import StoreError

from .engine import make_engine

__all__ = ["MIGRATIONS_DIR", "apply_migrations", "available_migrations"]

log = logging.getLogger("duetime.store.migrate")
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_LOCK_KEY = 0x64756574  # "duet"


def available_migrations() -> list[Path]:
    files = sorted(p for p in MIGRATIONS_DIR.iterdir() if _FILE.match(p.name))
    numbers = [int(_FILE.match(p.name).group(1)) for p in files]  # type: ignore[union-attr]
    # Numbers are unique and start at 0001; a gap is allowed because a number may be reserved by
    # work not merged yet (each file is recorded by name, so one that lands later is still
    # applied once, after the others).
    if len(set(numbers)) != len(numbers) or (numbers and numbers[0] != 1):
        raise StoreError(f"migrations must be numbered uniquely from 0001: {numbers}")
    return files


def apply_migrations(database_url: str) -> list[str]:
    """Apply the migrations this database lacks; returns the names applied (empty if current)."""
    engine = make_engine(database_url, pool_size=1, application_name="duetime-migrate")
    applied: list[str] = []
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS duetime_schema_migrations ("
                    " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
            )
        for path in available_migrations():
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
                done = conn.execute(
                    text("SELECT 1 FROM duetime_schema_migrations WHERE version = :v"),
                    {"v": path.stem},
                ).first()
                if done:
                    continue
                # The raw psycopg connection runs the whole file as one simple query, with no
                # placeholder parsing (function bodies contain % signs).
                raw = conn.connection.driver_connection
                raw.execute(path.read_text(encoding="utf-8"))  # type: ignore[union-attr]
                conn.execute(
                    text("INSERT INTO duetime_schema_migrations (version) VALUES (:v)"),
                    {"v": path.stem},
                )
                applied.append(path.stem)
                log.info("store.migration_applied version=%s", path.stem)
    except SQLAlchemyError as exc:
        raise StoreError(f"migration failed: {exc}") from exc
    finally:
        engine.dispose()
    return applied
