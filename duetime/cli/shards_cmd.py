"""``duetime shards [--json]``: every shard's owner and fencing token, in etcd and in the fence.

``owner`` / ``token`` come from etcd (the member holding the shard key, its create revision);
``fence_token`` / ``fence_owner`` from PostgreSQL's ``shard_owners`` (the highest token the shard
was claimed with), with ``rejected``: planning transactions the fence refused. The two agree once
the owner has claimed the shard in the fence (its next planning round). Without etcd configured
the planners run in SKIP LOCKED mode and nobody owns a shard: only the fence rows are shown.
With several clusters each shard's fence row is read from the shard's own cluster.
docs/failover.md explains the columns.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from duetime.config import load_settings
from duetime.coord.backend import LeaseView
from duetime.coord.etcd import EtcdBackend, etcd_root
from duetime.sharding import SHARD_COUNT
from duetime.store.fanout import shard_fences

from ._output import print_json, print_table
from ._store import cli_clusters

_COLUMNS = ("shard", "owner", "token", "fence_token", "fence_owner", "rejected", "claimed_at")


def register(sub: Any) -> None:
    parser = sub.add_parser("shards", help="each shard's owner and fencing token (etcd mode)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=_list)


async def _etcd_view(endpoints: str, topic_prefix: str) -> LeaseView:
    backend = EtcdBackend.from_endpoints(endpoints, etcd_root(topic_prefix))
    try:
        return await backend.view()
    finally:
        await backend.close()


def _list(args: argparse.Namespace) -> int:
    settings = load_settings()
    view = (
        asyncio.run(_etcd_view(settings.etcd_endpoints, settings.topic_prefix))
        if settings.etcd_endpoints
        else None
    )
    clusters = cli_clusters()
    try:
        fence = shard_fences(clusters)
    finally:
        clusters.close()
    rows: list[dict[str, Any]] = []
    for shard in range(SHARD_COUNT):
        key = view.shards.get(shard) if view else None
        row = fence.get(shard)
        rows.append(
            {
                "shard": shard,
                "owner": key.member if key else None,
                "token": key.create_revision if key else None,
                "fence_token": row.token if row else None,
                "fence_owner": row.owner if row else None,
                "rejected": row.rejected if row else 0,
                "claimed_at": row.claimed_at if row else None,
            }
        )
    if args.json:
        print_json(rows)
        return 0
    if view is None:
        print("SKIP LOCKED mode (no DUETIME_ETCD_ENDPOINTS): planners own no shards.")
    else:
        owners: dict[str, int] = {}
        for key in view.shards.values():
            owners[key.member] = owners.get(key.member, 0) + 1
        members = ", ".join(f"{m} ({owners.get(m, 0)} shards)" for m in sorted(view.members))
        free = SHARD_COUNT - len(view.shards)
        print(f"members: {members or 'none'}; shards without an owner: {free}")
    print_table(rows, _COLUMNS)
    return 0
