"""``duetime alerts``: the alert queue (``list``) and a tenant's signing key (``key``)."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from duetime.alerts import tenant_secret
from duetime.errors import ConfigError, InvalidInput
from duetime.store.alerts import alerts_list

from ._output import print_json, print_table
from ._store import cli_store

_COLUMNS = ("alert_id", "kind", "subject", "tenant", "state", "attempts", "created_at", "summary")
_STATES = ("pending", "delivered", "failed", "unrouted")
_TENANT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")  # the tenants table's CHECK


def register(sub: Any) -> None:
    parser = sub.add_parser("alerts", help="inspect alerts; print a tenant's signing key")
    alerts = parser.add_subparsers(dest="alerts_command", required=True)
    listing = alerts.add_parser("list", help="list alerts, newest first")
    listing.add_argument("--state", choices=_STATES, help="only alerts in this state")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    key = alerts.add_parser(
        "key",
        help="print the key a tenant verifies its alerts with (from DUETIME_ALERT_SECRET)",
    )
    key.add_argument("--tenant", required=True)
    key.set_defaults(func=_key)


def _list(args: argparse.Namespace) -> int:
    store = cli_store()
    try:
        rows = [dict(r._mapping) for r in alerts_list(store, args.state, args.limit)]
    finally:
        store.close()
    for row in rows:
        payload = row.pop("payload")
        payload = json.loads(payload) if isinstance(payload, str) else payload
        row["status"] = payload["status"]
        row["summary"] = payload["summary"]
        row["details"] = payload.get("details") or {}
    if args.json:
        print_json(rows)
    else:
        print_table(rows, _COLUMNS)
    return 0


def _key(args: argparse.Namespace) -> int:
    # Read from the environment, never from the command line, where `ps` would show it.
    secret = os.environ.get("DUETIME_ALERT_SECRET", "")
    if not secret:
        raise ConfigError("DUETIME_ALERT_SECRET is not set: there is no key to derive")
    if not _TENANT.match(args.tenant):
        raise InvalidInput("--tenant", "must match ^[a-z0-9][a-z0-9_-]{0,62}$")
    print(tenant_secret(secret, args.tenant))
    return 0
