"""The codec of each topic: dataclass <-> Avro record conversions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from duetime.errors import CodecError, InvalidInput
from duetime.events import JobRejected, JobTombstone, RunDead, RunHeartbeat, RunResult
from duetime.jobdef import validate_job
from duetime.model import (
    HeaderValue,
    HttpTarget,
    JobDefinition,
    KafkaTarget,
    RunEvent,
    SecretRef,
    Target,
)
from duetime.schedule import RetryPolicy, ScheduleSpec

from .codec import AvroCodec

__all__ = [
    "JOB_DEFINITIONS",
    "JOB_REJECTIONS",
    "RUN_DEAD",
    "RUN_EVENTS",
    "RUN_HEARTBEATS",
    "RUN_RESULTS",
]

_HTTP = "duetime.HttpTarget"
_KAFKA = "duetime.KafkaTarget"
_SECRET_REF = "duetime.SecretRef"


def _ms(value: timedelta) -> int:
    return int(value / timedelta(milliseconds=1))


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise CodecError("timestamp without a zone")
    return value.astimezone(UTC)


def _target_to(target: Target) -> tuple[str, dict[str, Any]]:
    if isinstance(target, HttpTarget):
        return _HTTP, {
            "url": target.url,
            "method": target.method,
            "headers": [{"name": n, "value": _header_value_to(v)} for n, v in target.headers],
            "body": target.body,
            "timeout_ms": _ms(target.timeout),
        }
    return _KAFKA, {"topic": target.topic, "key": target.key, "value": target.value}


def _header_value_to(value: HeaderValue) -> str | tuple[str, dict[str, str]]:
    if isinstance(value, SecretRef):
        return _SECRET_REF, {"name": value.name, "prefix": value.prefix}
    return value


def _header_value_from(value: Any) -> HeaderValue:
    if isinstance(value, str):
        return value
    if isinstance(value, tuple) and len(value) == 2 and value[0] == _SECRET_REF:
        return SecretRef(name=value[1]["name"], prefix=value[1]["prefix"])
    raise CodecError("target.headers: a value is neither a string nor a SecretRef")


def _target_from(value: Any) -> Target:
    if not isinstance(value, tuple) or len(value) != 2:
        raise CodecError("target: not a named union branch")
    name, record = value
    if name == _HTTP:
        return HttpTarget(
            url=record["url"],
            method=record["method"],
            headers=tuple((h["name"], _header_value_from(h["value"])) for h in record["headers"]),
            body=record["body"],
            timeout=timedelta(milliseconds=record["timeout_ms"]),
        )
    if name == _KAFKA:
        return KafkaTarget(topic=record["topic"], key=record["key"], value=record["value"])
    raise CodecError(f"target: unknown branch {name!r}")


def _job_to(job: JobDefinition | JobTombstone) -> dict[str, Any]:
    if isinstance(job, JobTombstone):
        return {
            "job_id": job.job_id,
            "version": job.version,
            "deleted": True,
            "schedule": {"kind": "at", "expression": "1970-01-01T00:00:00Z"},
            "target": (_KAFKA, {"topic": "-", "key": None, "value": ""}),
            "retry": {},
        }
    spec, retry = job.schedule, job.retry
    return {
        "job_id": job.job_id,
        "version": job.version,
        "deleted": False,
        "tenant": job.tenant,
        "schedule": {
            "kind": spec.kind,
            "expression": spec.expression,
            "time_zone": spec.time_zone,
            "dst_gap": spec.dst_gap,
            "dst_overlap": spec.dst_overlap,
            "start_at": spec.start_at,
        },
        "window_ms": _ms(job.window),
        "catch_up": job.catch_up,
        "max_catch_up": job.max_catch_up,
        "overlap": job.overlap,
        "target": _target_to(job.target),
        "target_service": job.target_service,
        "retry": {
            "max_attempts": retry.max_attempts,
            "initial_interval_ms": _ms(retry.initial_interval),
            "multiplier": retry.multiplier,
            "max_interval_ms": _ms(retry.max_interval),
            "jitter": retry.jitter,
        },
        "lease_ms": _ms(job.lease),
        "heartbeat_ms": _ms(job.heartbeat_interval),
        "paused": job.paused,
    }


def _job_from(record: dict[str, Any]) -> JobDefinition | JobTombstone:
    if record["version"] < 1:
        raise InvalidInput("version", "must be 1 or more")
    if record["deleted"]:
        return JobTombstone(job_id=record["job_id"], version=record["version"])
    sched, retry = record["schedule"], record["retry"]
    if sched["kind"] not in ("cron", "interval", "at"):
        raise InvalidInput("schedule.kind", f"must be cron, interval or at, not {sched['kind']!r}")
    target = _target_from(record["target"])
    from duetime.jobdef import default_target_service

    job = JobDefinition(
        job_id=record["job_id"],
        version=record["version"],
        tenant=record["tenant"],
        schedule=ScheduleSpec(
            kind=sched["kind"],
            expression=sched["expression"],
            time_zone=sched["time_zone"],
            dst_gap=sched["dst_gap"],
            dst_overlap=sched["dst_overlap"],
            start_at=sched["start_at"],
        ),
        window=timedelta(milliseconds=record["window_ms"]),
        catch_up=record["catch_up"],
        max_catch_up=record["max_catch_up"],
        overlap=record["overlap"],
        target=target,
        target_service=record["target_service"] or default_target_service(target),
        retry=RetryPolicy(
            max_attempts=retry["max_attempts"],
            initial_interval=timedelta(milliseconds=retry["initial_interval_ms"]),
            multiplier=retry["multiplier"],
            max_interval=timedelta(milliseconds=retry["max_interval_ms"]),
            jitter=retry["jitter"],
        ),
        lease=timedelta(milliseconds=record["lease_ms"]),
        heartbeat_interval=timedelta(milliseconds=record["heartbeat_ms"]),
        paused=record["paused"],
    )
    _check_choices(job)
    # Raises JobDefinitionError (field + reason): the ingest sends the record to jobs.rejected.
    return validate_job(job, field="job")


def _check_choices(job: JobDefinition) -> None:
    choices = {
        "schedule.dst_gap": (job.schedule.dst_gap, ("shift", "skip")),
        "schedule.dst_overlap": (job.schedule.dst_overlap, ("once", "twice")),
        "catch_up": (job.catch_up, ("once", "all", "skip")),
        "overlap": (job.overlap, ("allow", "skip", "buffer_one")),
    }
    for field, (value, allowed) in choices.items():
        if value not in allowed:
            raise InvalidInput(
                f"job.{field}", f"must be one of {', '.join(allowed)}, not {value!r}"
            )
    if not 1 <= job.retry.max_attempts <= 100:
        raise InvalidInput("job.retry.max_attempts", "must be between 1 and 100")
    if job.window < timedelta(0) or job.lease <= timedelta(0):
        raise InvalidInput("job.window_ms", "durations must not be negative")


def _run_to(run: RunEvent) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "job_id": run.job_id,
        "tenant": run.tenant,
        "scheduled_for": _utc(run.scheduled_for),
        "due_at": _utc(run.due_at),
        "attempt": run.attempt,
        "max_attempts": run.max_attempts,
        "target_service": run.target_service,
        "target": _target_to(run.target),
        "lease_ms": _ms(run.lease),
        "heartbeat_ms": _ms(run.heartbeat_interval),
        "retry": {
            "initial_interval_ms": _ms(run.retry.initial_interval),
            "multiplier": run.retry.multiplier,
            "max_interval_ms": _ms(run.retry.max_interval),
            "jitter": run.retry.jitter,
        },
    }


def _run_from(r: dict[str, Any]) -> RunEvent:
    return RunEvent(
        run_id=_uuid(r["run_id"]),
        job_id=r["job_id"],
        tenant=r["tenant"],
        scheduled_for=r["scheduled_for"],
        due_at=r["due_at"],
        attempt=r["attempt"],
        max_attempts=r["max_attempts"],
        target_service=r["target_service"],
        target=_target_from(r["target"]),
        lease=timedelta(milliseconds=r["lease_ms"]),
        heartbeat_interval=timedelta(milliseconds=r["heartbeat_ms"]),
        retry=RetryPolicy(
            max_attempts=r["max_attempts"],
            initial_interval=timedelta(milliseconds=r["retry"]["initial_interval_ms"]),
            multiplier=r["retry"]["multiplier"],
            max_interval=timedelta(milliseconds=r["retry"]["max_interval_ms"]),
            jitter=r["retry"]["jitter"],
        ),
    )


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _fields(obj: Any) -> dict[str, Any]:
    return dict(obj.__dict__)


def _heartbeat_from(r: dict[str, Any]) -> RunHeartbeat:
    return RunHeartbeat(**{**r, "run_id": _uuid(r["run_id"])})


def _result_from(r: dict[str, Any]) -> RunResult:
    return RunResult(**{**r, "run_id": _uuid(r["run_id"])})


def _dead_from(r: dict[str, Any]) -> RunDead:
    return RunDead(**{**r, "run_id": _uuid(r["run_id"])})


JOB_DEFINITIONS: AvroCodec[JobDefinition | JobTombstone] = AvroCodec(
    "job_definition.avsc", _job_to, _job_from
)
JOB_REJECTIONS: AvroCodec[JobRejected] = AvroCodec(
    "job_rejected.avsc", _fields, lambda r: JobRejected(**r)
)
RUN_EVENTS: AvroCodec[RunEvent] = AvroCodec("run_event.avsc", _run_to, _run_from)
RUN_HEARTBEATS: AvroCodec[RunHeartbeat] = AvroCodec("run_heartbeat.avsc", _fields, _heartbeat_from)
RUN_RESULTS: AvroCodec[RunResult] = AvroCodec("run_result.avsc", _fields, _result_from)
RUN_DEAD: AvroCodec[RunDead] = AvroCodec("run_dead.avsc", _fields, _dead_from)
