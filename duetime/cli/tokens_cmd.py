"""``duetime tokens create|revoke|list|topic-key``: bearer tokens of the REST API (docs/api.md).

``create`` prints the new token once, on stdout, and nothing else keeps it: the database holds
only its SHA-256. ``revoke`` takes the token's id (the 12 characters after ``dt_``, shown by
``list``), so a token never has to be pasted into a command line to be revoked. ``topic-key``
prints the key a tenant's producers sign jobs-topic records with (``duetime.jobs_guard``),
derived from ``DUETIME_JOBS_TOPIC_SECRET`` or else from the secret ``duetime up`` keeps in the
data dir (``topic_secret``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from duetime.api_tokens import TOKEN_ID_PATTERN, parse_token
from duetime.config import default_data_dir
from duetime.errors import ConfigError, InvalidInput, NotFound
from duetime.jobdef import TENANT_PATTERN
from duetime.jobs_guard import SECRET_ENV, tenant_key
from duetime.store import tokens

from ._output import print_json, print_table
from ._store import cli_store
from .topic_secret import TOPIC_SECRET_FILE, topic_secret

_COLUMNS = ("token_id", "tenant", "admin", "name", "created_at", "revoked_at")


def register(sub: Any) -> None:
    parser = sub.add_parser("tokens", help="bearer tokens of the REST API")
    commands = parser.add_subparsers(dest="tokens_command", required=True)
    create = commands.add_parser("create", help="create a token and print it (shown only once)")
    scope = create.add_mutually_exclusive_group(required=True)
    scope.add_argument("--tenant", help="the tenant whose jobs and runs the token may use")
    scope.add_argument("--admin", action="store_true", help="a token for every tenant")
    create.add_argument("--name", default="", help="a note saying who holds it")
    create.add_argument("--json", action="store_true")
    create.set_defaults(func=_create)
    revoke = commands.add_parser("revoke", help="revoke a token by its id (see `tokens list`)")
    revoke.add_argument("token_id", help="the token's id, or the token itself")
    revoke.set_defaults(func=_revoke)
    listing = commands.add_parser("list", help="tokens (ids, tenants, names; never the secrets)")
    listing.add_argument("--tenant", default=None)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    topic_key = commands.add_parser(
        "topic-key",
        help=f"a tenant's key for signing jobs-topic records (from {SECRET_ENV}, else the "
        f"secret duetime up keeps in <data dir>/{TOPIC_SECRET_FILE})",
    )
    topic_key.add_argument("--tenant", required=True)
    topic_key.set_defaults(func=_topic_key)


def _create(args: argparse.Namespace) -> int:
    tenant = None if args.admin else args.tenant
    if tenant is not None and not TENANT_PATTERN.match(tenant):
        raise InvalidInput(
            "--tenant", "use 1-63 characters from a-z 0-9 _ - (first: letter or digit)"
        )
    store = cli_store()
    try:
        with store.tx() as tx:
            issued, record = tokens.tokens_create(tx.conn, tenant=tenant, name=args.name)
    finally:
        store.close()
    if args.json:
        print_json([{"token": issued.token, **_row(record)}])
    else:
        print(issued.token)
    return 0


def _revoke(args: argparse.Namespace) -> int:
    token_id = parse_token(args.token_id) or args.token_id
    if not TOKEN_ID_PATTERN.match(token_id):
        raise InvalidInput("token_id", "is 12 characters of a-z 0-9 (see `duetime tokens list`)")
    store = cli_store()
    try:
        with store.tx() as tx:
            revoked = tokens.tokens_revoke(tx.conn, token_id)
    finally:
        store.close()
    if not revoked:
        raise NotFound(f"no unrevoked token {token_id!r}")
    print(f"{token_id}: revoked")
    return 0


def _list(args: argparse.Namespace) -> int:
    store = cli_store()
    try:
        with store.tx() as tx:
            records = tokens.tokens_list(tx.conn, args.tenant)
    finally:
        store.close()
    rows = [_row(r) for r in records]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, _COLUMNS)
    return 0


def _topic_key(args: argparse.Namespace) -> int:
    """The key a tenant's producers sign jobs-topic records with (``duetime.jobs_guard``)."""
    if not TENANT_PATTERN.match(args.tenant):
        raise InvalidInput(
            "--tenant", "use 1-63 characters from a-z 0-9 _ - (first: letter or digit)"
        )
    data_dir = default_data_dir()
    secret = topic_secret(os.environ, data_dir)  # the environment's, else duetime up's
    if not secret:
        raise ConfigError(
            f"{SECRET_ENV} is not set and {data_dir / TOPIC_SECRET_FILE} does not exist: "
            "there is no key to derive"
        )
    print(tenant_key(secret, args.tenant))
    return 0


def _row(record: tokens.TokenRecord) -> dict[str, Any]:
    return {
        "token_id": record.token_id,
        "tenant": record.tenant,
        "admin": record.admin,
        "name": record.name,
        "created_at": record.created_at,
        "revoked_at": record.revoked_at,
    }
