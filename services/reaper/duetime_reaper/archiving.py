"""The reaper archives old runs partitions once an hour, on a thread of its own.

The reaper is the service that already does the database's upkeep (lease expiry, dead runs,
pruning alerts), and an archive run is long (uploads, read-back) but its database work is
short transactions; on a thread of its own it never delays lease expiry. Every reaper runs it;
``duetime.archive.archiver`` takes an advisory lock, so with several reapers (and an operator's
``duetime archive`` at the same time) one archives and the others find the lock taken.

Without object storage configured (no ``DUETIME_S3_BUCKET`` in the environment or the stack's
``stack.env``) nothing is archived and runs stay in the database; ``archive.disabled`` says so
once at start. ``DUETIME_ARCHIVE_INTERVAL`` (seconds, default 3600; ``off``) sets the period;
the first run is ``DUETIME_ARCHIVE_FIRST_DELAY`` (default 60) seconds after the start.

With several PostgreSQL clusters each cluster's partitions are archived by an archiver of its
own (its own advisory lock), under the cluster's key prefix (``duetime.archive.cluster_keys``:
``<prefix>cluster-<index>/`` beyond cluster 0), one after the other; a cluster whose run fails
is logged and the others are still archived.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from duetime.archive.archiver import ArchiveConfig, Archiver, retention_from_env
from duetime.archive.cluster_keys import cluster_prefix
from duetime.archive.objects import S3ObjectStore, S3Settings
from duetime.errors import ConfigError, DuetimeError
from duetime.logs import event
from duetime.store import Store

__all__ = ["ArchiveSchedule", "PeriodicArchive", "make_periodic_archive"]

log = logging.getLogger("duetime.reaper.archive")


@dataclass(frozen=True)
class ArchiveSchedule:
    interval: timedelta | None = timedelta(hours=1)  # None: off
    first_delay: timedelta = timedelta(seconds=60)
    retention: timedelta = timedelta(days=7)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ArchiveSchedule:
        environ = os.environ if env is None else env

        def seconds(key: str, default: float, *, allow_off: bool = False) -> float | None:
            raw = environ.get(key, "").strip()
            if not raw:
                return default
            if allow_off and raw.lower() == "off":
                return None
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if value < 0 or (allow_off and value == 0):
                raise ConfigError(f"{key} must be a positive number of seconds, not {raw!r}")
            return value

        interval = seconds("DUETIME_ARCHIVE_INTERVAL", 3600.0, allow_off=True)
        first = seconds("DUETIME_ARCHIVE_FIRST_DELAY", 60.0) or 0.0
        return cls(
            interval=None if interval is None else timedelta(seconds=interval),
            first_delay=timedelta(seconds=first),
            retention=retention_from_env(environ),
        )


class PeriodicArchive:
    """Calls each cluster's ``archiver.run_once`` every ``interval`` until stopped; failures
    are logged and the next period tries again (a partition that failed stays in the
    database)."""

    def __init__(
        self,
        archivers: Sequence[Archiver],
        schedule: ArchiveSchedule,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.archivers = archivers
        self.schedule = schedule
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="duetime-archive", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        """Stop after the partition in progress (the thread is a daemon: one still busy after
        ``timeout`` dies with the process, and its partition is archived again next time)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        interval = self.schedule.interval
        if interval is None:
            return
        wait = self.schedule.first_delay.total_seconds()
        while not self._stop.wait(wait):
            self.run_once()
            wait = interval.total_seconds()

    def run_once(self) -> int:
        """One run of every cluster's archiver; returns how many failed (each logged)."""
        failed = 0
        for cluster, archiver in enumerate(self.archivers):
            if self._stop.is_set():
                break
            try:
                archiver.run_once(self._clock())
            except DuetimeError as exc:
                failed += 1
                event(log, "archive.run_failed", logging.ERROR, cluster=cluster, error=exc)
        return failed


def make_periodic_archive(
    store: Store, env: Mapping[str, str] | None = None, *, clusters: Sequence[Store] = ()
) -> PeriodicArchive | None:
    """The reaper's archive thread, or None (logged) when it is off or has no storage.

    ``clusters``: every cluster's store in cluster order (default: ``store``, one cluster)."""
    schedule = ArchiveSchedule.from_env(env)
    if schedule.interval is None:
        event(log, "archive.disabled", reason="DUETIME_ARCHIVE_INTERVAL=off")
        return None
    settings = S3Settings.load(None if env is None else dict(env))
    if settings is None:
        event(log, "archive.disabled", reason="no object storage (DUETIME_S3_BUCKET)")
        return None
    objects = S3ObjectStore(settings)
    archivers = [
        Archiver(
            cluster_store,
            objects,
            ArchiveConfig(
                retention=schedule.retention, prefix=cluster_prefix(settings.prefix, cluster)
            ),
        )
        for cluster, cluster_store in enumerate(clusters or (store,))
    ]
    event(
        log,
        "archive.scheduled",
        interval_s=schedule.interval.total_seconds(),
        retention_days=schedule.retention.days,
        bucket=settings.bucket,
    )
    return PeriodicArchive(archivers, schedule)
