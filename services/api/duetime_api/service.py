"""``duetime service api``: the REST API on uvicorn, until SIGTERM or SIGINT.

A stop signal (once or any number of times) makes uvicorn stop accepting connections and let
requests in flight finish for up to ``_GRACEFUL_SHUTDOWN`` seconds; the process then exits 0,
like every service (uvicorn's own handling would end it by the signal once it has shut down),
and the rest of the stop is bounded by ``exit_after``. The access log goes through duetime's log
format and holds the method, path and status of each request, never a header: the bearer token
is not logged, and the code of a one-time sign-in link is cut from its path (``access_log``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
from collections.abc import Iterator, Sequence

import uvicorn

from duetime.config import load_settings
from duetime.lifetime import exit_after
from duetime.logs import configure_logging, event
from duetime.metrics import serve_metrics
from duetime.store.clusters import ClusterStores

from .access_log import install_access_log_redaction
from .app import create_app
from .metrics import ApiMetrics

__all__ = ["DEFAULT_PORT", "main"]

log = logging.getLogger("duetime.api")

#: The port ``duetime service api`` listens on unless told otherwise.
DEFAULT_PORT = 8470
_GRACEFUL_SHUTDOWN = 5


class _Server(uvicorn.Server):
    """uvicorn's server with duetime's stop: SIGTERM and SIGINT ask for the graceful shutdown
    and the process then exits normally instead of being ended by the signal afterwards."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: setattr(self, "should_exit", True))
        yield


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="duetime service api")
    parser.add_argument(
        "--host",
        default=os.environ.get("DUETIME_API_HOST", "127.0.0.1"),
        help="address to listen on (env DUETIME_API_HOST, default 127.0.0.1)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("DUETIME_API_PORT", DEFAULT_PORT)),
        help=f"port to listen on (env DUETIME_API_PORT, default {DEFAULT_PORT})",
    )
    args = parser.parse_args(argv)
    configure_logging("api")
    install_access_log_redaction()
    settings = load_settings()
    clusters = ClusterStores(
        settings.clusters(),
        pool_size=4,
        application_name="duetime-api",
        hot_horizon=settings.hot_horizon,
    )
    app = create_app(clusters, settings, ApiMetrics())
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_config=None,  # duetime's handler and format (configure_logging)
        access_log=True,
        server_header=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN,
    )
    server = _Server(config)
    event(log, "api.starting", url=f"http://{args.host}:{args.port}")
    endpoint = serve_metrics("api", os.environ)
    try:
        server.run()
    finally:
        event(log, "api.stopping")
        if endpoint is not None:
            endpoint.close()
        exit_after(5.0, "api")
        clusters.close()
    return 0 if server.started else 1
