"""One exception tree for duetime.

Drivers' errors (psycopg, confluent-kafka, aetcd) are translated at the adapter edge with
``raise ... from`` so that callers only ever catch these::

    DuetimeError
    ├── InvalidInput            bad user input: a field and a reason; CLI exit code 2, API 400
    │   ├── ScheduleError       cron / zone / interval / DST-rule problems
    │   ├── JobDefinitionError  a job definition that cannot be stored
    │   └── QuotaExceeded       writes that would take a tenant above its max_jobs
    ├── NotFound                a job or run that does not exist
    ├── ConfigError             settings that cannot work (missing URL, bad port)
    ├── StackError              the embedded stack could not start or stop a component
    ├── StoreError              PostgreSQL failed (connection, constraint we did not expect)
    │   └── DataRefused         ... because of the data itself (a check, a type, a key)
    ├── BusError                the Kafka-protocol broker failed (delivery, topic creation)
    │   └── CodecError          a record that does not decode against its Avro schema
    ├── CoordError              etcd failed (unreachable, timed out) while shards were coordinated
    ├── ArchiveError            object storage failed, or an archive object did not verify
    └── LeaseLost               a worker or planner lost the lease it was working under (fencing)
"""

from __future__ import annotations

__all__ = [
    "ArchiveError",
    "BusError",
    "CodecError",
    "ConfigError",
    "CoordError",
    "DataRefused",
    "DuetimeError",
    "InvalidInput",
    "JobDefinitionError",
    "LeaseLost",
    "NotFound",
    "QuotaExceeded",
    "ScheduleError",
    "StackError",
    "StoreError",
]


class DuetimeError(Exception):
    """Base of every error duetime raises on purpose."""


class InvalidInput(DuetimeError):
    """User input that duetime refuses; ``field`` names what is wrong, ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


class ScheduleError(InvalidInput):
    """A schedule (cron, interval, instant, zone, DST rule) that cannot be used."""


class JobDefinitionError(InvalidInput):
    """A job definition that fails validation; nothing of it is stored."""


class QuotaExceeded(InvalidInput):
    """A batch of job writes that would take ``tenant`` above its ``max_jobs``; nothing of it is
    stored. ``jobs`` is what the tenant has, ``adds`` the jobs the batch would bring into it."""

    def __init__(self, field: str, *, tenant: str, max_jobs: int, jobs: int, adds: int) -> None:
        super().__init__(
            field,
            f"tenant {tenant} may have at most {max_jobs} jobs; "
            f"it has {jobs} and this batch adds {adds}",
        )
        self.tenant = tenant
        self.max_jobs = max_jobs
        self.jobs = jobs
        self.adds = adds


class NotFound(DuetimeError):
    """The job or run asked for does not exist."""


class ConfigError(DuetimeError):
    """Settings that cannot work."""


class StackError(DuetimeError):
    """The embedded stack could not start, check or stop a component."""


class StoreError(DuetimeError):
    """PostgreSQL failed in a way the caller cannot fix by changing its input."""


class DataRefused(StoreError):
    """PostgreSQL refused the data itself (a check, a type, a key): not an outage, so a batch
    written without the offending record would succeed."""


class BusError(DuetimeError):
    """The Kafka-protocol broker failed (delivery, topic creation, consumption)."""


class CodecError(BusError):
    """A record that does not decode against its Avro schema, or fails semantic checks."""


class LeaseLost(DuetimeError):
    """The lease a worker or planner held is gone; the work must stop (fencing)."""


class CoordError(DuetimeError):
    """etcd (the shard-lease backend) failed: unreachable, timed out, or refused a call."""


class ArchiveError(DuetimeError):
    """Object storage failed, or an archive object read back did not match what was written
    (row count or checksum): the partition it came from stays in the database."""
