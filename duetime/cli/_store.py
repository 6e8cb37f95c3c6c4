"""The database and broker a CLI command uses, checked before the command starts.

A command without a reachable stack ends with one line that says where it looked and how to
start the stack, and exit code 1, never a driver's traceback or its multi-line message::

    duetime: cannot reach PostgreSQL at 127.0.0.1:41234 (DUETIME_DATABASE_URL from
    /srv/app/.duetime/stack.env): connection refused; the stack there is not running: start it
    with `duetime up` (or `duetime stack up`), or set DUETIME_DATABASE_URL
"""

from __future__ import annotations

import logging
import os
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from duetime.config import STACK_ENV_FILE, Settings, load_settings
from duetime.errors import DuetimeError
from duetime.store import Store
from duetime.store.clusters import ClusterStores

__all__ = [
    "NoStack",
    "check_broker",
    "check_cluster",
    "cli_clusters",
    "cli_settings",
    "cli_store",
    "database_url",
]

_BROKER_TIMEOUT = 5.0


class NoStack(DuetimeError):
    """The database or broker a command needs is not configured or does not answer."""


def cli_settings() -> Settings:
    return load_settings()


def _origin(settings: Settings, key: str) -> str:
    """Where the setting ``key`` came from: the environment or the stack's env file."""
    if os.environ.get(key):
        return f"{key} from the environment"
    return f"{key} from {settings.data_dir / STACK_ENV_FILE}"


def _how(settings: Settings, key: str) -> str:
    if os.environ.get(key):
        return f"start it, or point {key} at a running one"
    if (settings.data_dir / STACK_ENV_FILE).exists():
        return (
            "the stack there is not running: start it with `duetime up` "
            f"(or `duetime stack up`), or set {key}"
        )
    return f"start the stack with `duetime up` (or `duetime stack up`), or set {key}"


def _missing(settings: Settings, key: str, what: str) -> NoStack:
    env_file = settings.data_dir / STACK_ENV_FILE
    return NoStack(
        f"no {what}: {key} is not set and {env_file} does not exist (no stack started in "
        f"{settings.data_dir}); start one with `duetime up` (or `duetime stack up`) in this "
        f"directory, or set {key}"
    )


def _reason(exc: BaseException) -> str:
    """The driver's message in one line: its last clause (psycopg writes several lines)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first.rsplit(": ", 1)[-1].strip().lower() or first


def database_url(settings: Settings) -> str:
    """The configured database URL, or ``NoStack`` saying where it looked."""
    if not settings.database_url:
        raise _missing(settings, "DUETIME_DATABASE_URL", "database")
    return settings.database_url


def cli_store(settings: Settings | None = None) -> Store:
    """A one-connection ``Store`` for a command, its database checked to answer.

    With several clusters this is the home cluster (tenants, targets, tokens, alerts).
    """
    settings = settings or cli_settings()
    url = database_url(settings)
    store = Store(
        url, pool_size=1, application_name="duetime-cli", hot_horizon=settings.hot_horizon
    )
    try:
        _check_reachable(store, url, settings, "PostgreSQL", "DUETIME_DATABASE_URL")
    except NoStack:
        store.close()
        raise
    return store


def cli_clusters(settings: Settings | None = None, *, check: bool = True) -> ClusterStores:
    """A one-connection ``Store`` per cluster of the shard map, each checked to answer.

    Without ``DUETIME_SHARD_MAP`` this is the one database of ``cli_store`` (and the same
    error when it does not answer); with a map, the error names the cluster and its shards.
    ``check=False`` leaves the checks to the caller (``check_cluster``), for a command whose
    clusters go on when one of them does not answer.
    """
    settings = settings or cli_settings()
    database_url(settings)
    clusters = ClusterStores(
        settings.clusters(),
        pool_size=1,
        application_name="duetime-cli",
        hot_horizon=settings.hot_horizon,
    )
    try:
        for index in range(len(clusters) if check else 0):
            check_cluster(clusters, index, settings)
    except NoStack:
        clusters.close()
        raise
    return clusters


def check_cluster(clusters: ClusterStores, index: int, settings: Settings) -> None:
    """``NoStack`` naming cluster ``index`` (and its shards) unless it answers."""
    shard_map = clusters.shard_map
    if settings.shard_map is None:
        what, key = "PostgreSQL", "DUETIME_DATABASE_URL"
    else:
        shards = _shards_text(sorted(shard_map.shards_of(index)))
        what = f"PostgreSQL cluster {index + 1} of {len(clusters)} ({shards})"
        key = "DUETIME_SHARD_MAP"
    _check_reachable(clusters.stores[index], shard_map.urls[index], settings, what, key)


def _shards_text(shards: list[int]) -> str:
    if shards[-1] - shards[0] + 1 == len(shards):
        return f"shards {shards[0]}-{shards[-1]}"
    return f"{len(shards)} shards"


def _check_reachable(store: Store, url: str, settings: Settings, what: str, key: str) -> None:
    try:
        with store.engine.connect():
            pass
    except SQLAlchemyError as exc:
        parsed = make_url(url)
        where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
        raise NoStack(
            f"cannot reach {what} at {where} ({_origin(settings, key)}): {_reason(exc)}; "
            f"{_how(settings, key)}"
        ) from exc


def check_broker(settings: Settings) -> None:
    """``NoStack`` unless the broker answers a metadata request within 5 s.

    librdkafka would otherwise retry forever and write its connection errors to stderr; its logs
    go to a silent logger here (the one line says what happened).
    """
    key = "DUETIME_KAFKA_BOOTSTRAP"
    if not settings.kafka_bootstrap:
        raise _missing(settings, key, "broker")
    quiet = logging.getLogger("duetime.cli.librdkafka")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    errors: list[str] = []
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap,
        "logger": quiet,
        "error_cb": lambda error: errors.append(str(error)),
        "socket.connection.setup.timeout.ms": int(_BROKER_TIMEOUT * 1000),
    }
    client = AdminClient(config)
    try:
        client.list_topics(timeout=_BROKER_TIMEOUT)
    except KafkaException as exc:
        client.poll(0)  # serves the error callbacks: a refused connection says so
        reason = "no answer within 5 s"
        if any("refused" in e.lower() for e in errors):
            reason = "connection refused"
        raise NoStack(
            f"cannot reach the broker at {settings.kafka_bootstrap} ({_origin(settings, key)}): "
            f"{reason}; {_how(settings, key)}"
        ) from exc
