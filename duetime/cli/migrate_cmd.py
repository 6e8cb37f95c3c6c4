"""``duetime migrate``: apply the schema migrations the databases lack.

With several clusters (``DUETIME_SHARD_MAP``) every cluster is migrated, the home cluster first:
each holds the full schema. One line per cluster says what was applied there.
"""

from __future__ import annotations

import argparse
from typing import Any

from sqlalchemy.engine import make_url

from duetime.errors import StoreError
from duetime.store.migrate import apply_migrations

from ._store import cli_settings, cli_store


def register(sub: Any) -> None:
    parser = sub.add_parser("migrate", help="apply database migrations (on every cluster)")
    parser.add_argument(
        "--database-url",
        help="migrate only this database (default: every cluster of DUETIME_SHARD_MAP, else "
        "DUETIME_DATABASE_URL, else the local stack's)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.database_url:
        urls = [args.database_url]
    else:
        settings = cli_settings()
        # The home database, checked to answer first (one line saying where it looked if not).
        cli_store(settings).close()
        shard_map = settings.clusters()
        home = shard_map.home_url
        urls = [home, *(url for url in shard_map.urls if url != home)]
    for index, url in enumerate(urls, start=1):
        where = "" if len(urls) == 1 else f"cluster {index} of {len(urls)}: "
        try:
            applied = apply_migrations(url)
        except StoreError as exc:
            host = make_url(url)
            raise StoreError(f"{where}{host.host}:{host.port or 5432}: {exc}") from exc
        print(where + (f"applied: {', '.join(applied)}" if applied else "schema is up to date"))
    return 0
