"""The API's Prometheus metrics (docs/metrics.md): requests, and the runs async targets end.

Requests are counted by route template (``/v1/runs/{run_id}``, never the path itself: a label per
run id or job id would grow without bound), method and status, by a small ASGI middleware, once
per request after its answer started. A path that matched no route counts as ``unmatched``.

Runs finished through an async target's callbacks (``callbacks``) are counted under the names the
worker uses for the attempts it ends itself (``duetime_runs_succeeded``, ``_retried``, ``_dead``,
``duetime_completions_fenced``): each run's transition is made by one service and counted once,
so summing a counter over the services that export it stays the total, async runs included.

``duetime service api`` serves them on its own ``/metrics`` port, like every service
(``duetime.metrics.serve_metrics``); an application made without metrics (tests) gets a registry
of its own so that several applications in one process do not collide.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from duetime.metrics import RUN_END_METRICS

__all__ = ["ApiMetrics", "RequestCounter"]

UNMATCHED = "unmatched"


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.requests = Counter(
            "duetime_api_requests",
            "Requests answered by the API, by route template, method and status code",
            ["route", "method", "status"],
            registry=registry,
        )
        # succeeded, retried, dead and fenced completions, under the worker's names
        self._ends = {
            key: Counter(name, text, registry=registry)
            for key, (name, text) in RUN_END_METRICS.items()
        }
        self.completions_fenced = self._ends["fenced"]
        self.heartbeats = Counter(
            "duetime_api_heartbeats",
            "Async targets' heartbeats: accepted (lease renewed) or fenced",
            ["result"],
            registry=registry,
        )
        for result in ("accepted", "fenced"):
            self.heartbeats.labels(result)

    def count_completion(self, state: str) -> None:
        """An async target's completion was applied and left its run in ``state``."""
        counter = self._ends.get(state)  # a run state: never "fenced"
        if counter is not None:
            counter.inc()


class RequestCounter:
    """ASGI middleware: one ``duetime_api_requests`` increment per HTTP request."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception that escapes before an answer is a 500 to the client

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            # The router put the matched route in the scope (the same dict) on its way in.
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            self.metrics.requests.labels(template, scope["method"], str(status)).inc()
