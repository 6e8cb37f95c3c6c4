"""``duetime migrate``: apply the schema migrations the database lacks."""

from __future__ import annotations

import argparse
from typing import Any

from duetime.config import load_settings
from duetime.store.migrate import apply_migrations


def register(sub: Any) -> None:
    parser = sub.add_parser("migrate", help="apply database migrations")
    parser.add_argument("--database-url", help="default: DUETIME_DATABASE_URL or the local stack")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    url = args.database_url or load_settings().require_database()
    applied = apply_migrations(url)
    print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")
    return 0
