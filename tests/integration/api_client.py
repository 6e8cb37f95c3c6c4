"""The REST API over a test's own database, driven in-process (Starlette's test client)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

from duetime.config import Settings
from duetime.store import Store
from duetime.store.tokens import tokens_create
from duetime_api.app import create_app

__all__ = ["Api", "http_job", "open_api"]


@dataclass
class Api:
    client: TestClient
    store: Store

    def token(self, tenant: str | None) -> dict[str, str]:
        """Headers carrying a new token of ``tenant`` (None: admin)."""
        with self.store.tx() as tx:
            issued, _record = tokens_create(tx.conn, tenant=tenant, name="test")
        return {"Authorization": f"Bearer {issued.token}"}


@contextmanager
def open_api(
    database_url: str, kafka_bootstrap: str = "", topic_prefix: str = "api-test."
) -> Iterator[Api]:
    store = Store(database_url, pool_size=2, application_name="duetime-api-test")
    app = create_app(store, Settings(database_url, kafka_bootstrap, topic_prefix=topic_prefix))
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            yield Api(client, store)
    finally:
        store.close()


def http_job(job_id: str, **fields: Any) -> dict[str, Any]:
    """A valid job body (overridable field by field)."""
    return {
        "id": job_id,
        "schedule": {"cron": "0 2 * * *", "time_zone": "Europe/Berlin"},
        "target": {"http": {"url": "https://example.com/hook"}},
        **fields,
    }
