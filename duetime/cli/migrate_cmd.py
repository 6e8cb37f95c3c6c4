"""``duetime migrate``: apply the schema migrations the database lacks."""

from __future__ import annotations

import argparse
from typing import Any

from duetime.store.migrate import apply_migrations

from ._store import cli_store


def register(sub: Any) -> None:
    parser = sub.add_parser("migrate", help="apply database migrations")
    parser.add_argument("--database-url", help="default: DUETIME_DATABASE_URL or the local stack")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    url = args.database_url
    if not url:
        # The local stack's database, checked to answer first (one line if it does not).
        store = cli_store()
        url = store.engine.url.render_as_string(hide_password=False)
        store.close()
    applied = apply_migrations(url)
    print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")
    return 0
