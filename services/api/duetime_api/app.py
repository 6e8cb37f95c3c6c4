"""The REST API as an ASGI application: ``create_app(clusters, settings)``.

Endpoints are plain functions (FastAPI runs them on its thread pool), each one short
transaction through the store of the cluster it concerns (``routing``). ``/openapi.json``
describes them; ``/healthz`` needs no token.
The web dashboard (``dashboard``) is served under ``/ui`` by the same application. Requests and
the runs async targets end are counted (``metrics``); ``duetime service api`` serves the counts
on a ``/metrics`` port of their own, like every service.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from duetime.config import Settings
from duetime.logs import event
from duetime.store.clusters import ClusterStores

from . import callbacks, dashboard, jobs, runs, stats
from .auth import Caller
from .errors import install_error_handlers
from .metrics import ApiMetrics, RequestCounter
from .models import WhoAmIOut
from .stats import LagProbes

__all__ = ["create_app"]

log = logging.getLogger("duetime.api")


def create_app(
    clusters: ClusterStores, settings: Settings, metrics: ApiMetrics | None = None
) -> FastAPI:
    """The application; ``clusters`` (one store per PostgreSQL cluster of the shard map) and
    the lag probes live as long as it does. ``metrics``: where it counts (``duetime service
    api`` passes the process's, which it serves); by default a registry of its own."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Logged once the server is past its start-up, its stop signals handled (service.py).
        event(log, "api.started")
        try:
            yield
        finally:
            app.state.lag_probes.close()

    app = FastAPI(
        title="duetime",
        version="1",
        summary="A distributed job scheduler: jobs, runs and the load ahead.",
        description="Every /v1 endpoint needs `Authorization: Bearer <token>` (docs/api.md).",
        lifespan=lifespan,
        # FastAPI's interactive pages load their scripts from a CDN: none is served, so nothing
        # the API serves reaches outside the machine. /openapi.json is the document.
        docs_url=None,
        redoc_url=None,
    )
    app.state.clusters = clusters
    app.state.store = clusters.home
    app.state.lag_probes = LagProbes(settings)
    app.state.metrics = metrics or ApiMetrics(CollectorRegistry())
    app.add_middleware(RequestCounter, metrics=app.state.metrics)
    install_error_handlers(app)
    app.include_router(jobs.router)
    app.include_router(runs.router)
    app.include_router(callbacks.router)
    app.include_router(stats.router)
    # The web dashboard under /ui: HTML, outside the OpenAPI document (docs/dashboard.md).
    app.include_router(dashboard.router)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The process is up (no token needed, nothing looked up)."""
        return {"status": "ok"}

    @app.get("/v1/whoami", tags=["auth"])
    def whoami(caller: Caller) -> WhoAmIOut:
        """The token's id and scope."""
        return WhoAmIOut(token_id=caller.token_id, tenant=caller.tenant, admin=caller.admin)

    return app
