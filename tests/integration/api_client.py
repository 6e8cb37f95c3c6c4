"""The REST API over a test's own database (or two, as two clusters), driven in-process
(Starlette's test client)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from duetime.config import Settings
from duetime.shard_map import ShardMap
from duetime.store import Store
from duetime.store.clusters import ClusterStores
from duetime.store.tokens import tokens_create
from duetime_api.app import create_app
from duetime_api.metrics import ApiMetrics

__all__ = ["Api", "dead_run", "http_job", "open_api"]


@dataclass
class Api:
    client: TestClient
    store: Store  # the home cluster's
    clusters: ClusterStores

    def token(self, tenant: str | None) -> dict[str, str]:
        """Headers carrying a new token of ``tenant`` (None: admin)."""
        with self.store.tx() as tx:
            issued, _record = tokens_create(tx.conn, tenant=tenant, name="test")
        return {"Authorization": f"Bearer {issued.token}"}

    def counted(self, name: str, **labels: str) -> float:
        """The value of one sample of the application's metrics (0 when never counted)."""
        metrics: ApiMetrics = self.client.app.state.metrics  # type: ignore[attr-defined]
        return metrics.registry.get_sample_value(name, labels) or 0.0


@contextmanager
def open_api(
    database_url: str | tuple[str, ...],
    kafka_bootstrap: str = "",
    topic_prefix: str = "api-test.",
) -> Iterator[Api]:
    """The API on ``database_url``; given several URLs, on as many clusters (shards spread
    evenly, the first one home)."""
    urls = (database_url,) if isinstance(database_url, str) else database_url
    shard_map = ShardMap.even(urls)
    clusters = ClusterStores(shard_map, pool_size=2, application_name="duetime-api-test")
    settings = Settings(
        shard_map.home_url,
        kafka_bootstrap,
        topic_prefix=topic_prefix,
        shard_map=shard_map if len(urls) > 1 else None,
    )
    app = create_app(clusters, settings)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            yield Api(client, clusters.home, clusters)
    finally:
        clusters.close()


def http_job(job_id: str, **fields: Any) -> dict[str, Any]:
    """A valid job body (overridable field by field)."""
    return {
        "id": job_id,
        "schedule": {"cron": "0 2 * * *", "time_zone": "Europe/Berlin"},
        "target": {"http": {"url": "https://example.com/hook"}},
        **fields,
    }


def dead_run(
    api: Api,
    job_id: str,
    headers: dict[str, str],
    *,
    released_at: datetime | None = None,
    throttled_ms: int | None = None,
) -> uuid.UUID:
    """Trigger a run of the job and let a worker's one attempt fail for good (the attempt
    released at ``released_at`` after ``throttled_ms`` of throttling, when given)."""
    triggered = api.client.post(f"/v1/jobs/{job_id}/trigger", headers=headers)
    assert triggered.status_code == 201, triggered.text
    run_id = uuid.UUID(triggered.json()["run_id"])
    scheduled_for = datetime.fromisoformat(triggered.json()["scheduled_for"])
    claim = api.store.runs_claim(
        run_id,
        scheduled_for,
        1,
        "worker-a",
        timedelta(seconds=30),
        released_at=released_at,
        throttled_ms=throttled_ms,
    )
    assert claim is not None
    assert api.store.runs_complete(
        run_id=run_id,
        scheduled_for=scheduled_for,
        attempt=1,
        worker="worker-a",
        lease_token=claim.lease_token,
        state="dead",
        outcome="failed",
        error="HTTP 500",
        status_code=500,
    )
    return run_id
