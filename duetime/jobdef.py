"""Job definitions from users (JSON / YAML files, the jobs topic): parse and validate.

Validation is all-or-nothing: a file with one bad job is refused as a whole, with an error naming
the field (``jobs[2].schedule.cron: ...``), and nothing of it is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import yaml

from duetime.bus.target_records import reserved_topic
from duetime.credentials import SECRET_NAME_PATTERN, is_credential_header
from duetime.errors import InvalidInput, JobDefinitionError
from duetime.model import HeaderValue, HttpTarget, JobDefinition, KafkaTarget, SecretRef, Target
from duetime.schedule import RetryPolicy, ScheduleCache, ScheduleSpec

__all__ = [
    "JOB_ID_PATTERN",
    "MAX_BODY_BYTES",
    "load_job_file",
    "parse_job",
    "parse_jobs",
    "validate_job",
]

JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
MAX_BODY_BYTES = 256 * 1024
MAX_URL_LENGTH = 2083
MAX_HEADERS = 64
MAX_HEADER_BYTES = 16 * 1024
MAX_SECRET_PREFIX = 256
_SECRET_EXAMPLE = '{"secret": "billing-api-token", "prefix": "Bearer "}'
# duetime sets these itself; a job may not override them.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
        "idempotency-key",
    }
)
# Validating a schedule compiles it; a file of 100k midnight jobs holds a handful of distinct
# specs, so each is compiled once (an invalid spec is never cached and fails every time).
_VALIDATED = ScheduleCache(max_size=10_000)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_KNOWN_KEYS = frozenset(
    {
        "id",
        "job_id",
        "tenant",
        "schedule",
        "window_seconds",
        "catch_up",
        "max_catch_up",
        "overlap",
        "target",
        "target_service",
        "retry",
        "lease_seconds",
        "heartbeat_seconds",
        "paused",
        "version",
    }
)


def _fail(field: str, reason: str) -> JobDefinitionError:
    return JobDefinitionError(field, reason)


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(field, f"must be an object, not {type(value).__name__}")
    return cast(Mapping[str, Any], value)


def _string(value: Any, field: str, *, max_length: int = 1024) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(field, "must be a non-empty string")
    if len(value) > max_length:
        raise _fail(field, f"is longer than {max_length} characters")
    if "\x00" in value:
        raise _fail(field, "contains a NUL character")
    _text_size(value, field)
    return value


def _text_size(value: str, field: str) -> int:
    """The UTF-8 size of ``value``; a lone UTF-16 surrogate (which a JSON file's ``\\ud800``
    escape can carry) has none, and neither the database nor a worker could send it."""
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise _fail(field, "is not valid Unicode (a lone surrogate)") from exc


def _number(value: Any, field: str, *, low: float, high: float, integer: bool = True) -> float:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise _fail(field, "must be a whole number" if integer else "must be a number")
    if not low <= value <= high:
        raise _fail(field, f"must be between {low:g} and {high:g}, not {value}")
    return float(value)


def _flag(value: Any, field: str) -> bool:
    # Not bool(value): the string "false" would be true.
    if not isinstance(value, bool):
        raise _fail(field, f"must be true or false, not {value!r}")
    return value


def _choice(value: Any, field: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise _fail(field, f"must be one of {', '.join(choices)}, not {value!r}")
    return str(value)


def _seconds(
    data: Mapping[str, Any], key: str, field: str, default: float, low: float, high: float
) -> timedelta:
    if key not in data:
        return timedelta(seconds=default)
    return timedelta(seconds=_number(data[key], field, low=low, high=high, integer=False))


_SCHEDULES: dict[tuple[tuple[str, Any], ...], ScheduleSpec] = {}


def _parse_schedule(value: Any, field: str) -> ScheduleSpec:
    """A schedule object's spec; memoised by content, as a file of 100k jobs holds a handful of
    distinct schedules (only a schedule that parsed is remembered, errors are raised each time).
    """
    try:
        key = tuple(value.items()) if type(value) is dict else None
        found = _SCHEDULES.get(key) if key is not None else None
    except TypeError:  # a value that is not hashable (a list, an object): parse it in full
        key = found = None
    if found is not None:
        return found
    spec = _parse_schedule_fields(value, field)
    if key is not None and len(_SCHEDULES) < 10_000:
        _SCHEDULES[key] = spec
    return spec


def _parse_schedule_fields(value: Any, field: str) -> ScheduleSpec:
    data = _mapping(value, field)
    kinds = [k for k in ("cron", "interval", "at") if k in data]
    if len(kinds) != 1:
        raise _fail(field, "needs exactly one of cron, interval or at")
    kind = kinds[0]
    allowed = {kind, "time_zone", "dst_gap", "dst_overlap", "start_at"}
    for key in data:
        if key not in allowed:
            raise _fail(f"{field}.{key}", "is not a schedule field")
    start_at: datetime | None = None
    if "start_at" in data:
        start_at = _instant(data["start_at"], f"{field}.start_at")
    spec = ScheduleSpec(
        kind=cast(Any, kind),
        expression=_string(data[kind], f"{field}.{kind}", max_length=256),
        time_zone=_string(data.get("time_zone", "UTC"), f"{field}.time_zone", max_length=64),
        dst_gap=cast(
            Any, _choice(data.get("dst_gap", "shift"), f"{field}.dst_gap", ("shift", "skip"))
        ),
        dst_overlap=cast(
            Any, _choice(data.get("dst_overlap", "once"), f"{field}.dst_overlap", ("once", "twice"))
        ),
        start_at=start_at,
    )
    return spec


def _instant(value: Any, field: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    else:
        text = _string(value, field, max_length=64)
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise _fail(field, f"is not an ISO-8601 instant: {text!r}") from exc
    if moment.tzinfo is None:
        raise _fail(field, "needs a UTC offset or Z")
    return moment


def _parse_headers(value: Any, field: str) -> tuple[tuple[str, HeaderValue], ...]:
    """A header's value is a string, or ``{"secret": NAME, "prefix": TEXT}`` naming a secret
    the worker holds (docs/targets.md, "Secrets"); ``validate_job`` checks both."""
    data = _mapping(value, field)
    if len(data) > MAX_HEADERS:
        raise _fail(field, f"has more than {MAX_HEADERS} headers")
    headers: list[tuple[str, HeaderValue]] = []
    for key, header_value in data.items():
        name = str(key)
        if isinstance(header_value, str):
            headers.append((name, header_value))
        elif isinstance(header_value, Mapping):
            headers.append((name, _parse_secret_ref(header_value, f"{field}.{name}")))
        else:
            raise _fail(
                f"{field}.{name}",
                f"must be a string or a secret reference such as {_SECRET_EXAMPLE}",
            )
    return tuple(headers)


def _parse_secret_ref(data: Mapping[Any, Any], field: str) -> SecretRef:
    for key in data:
        if key not in ("secret", "prefix"):
            raise _fail(f"{field}.{key}", "is not a secret reference field (secret, prefix)")
    if "secret" not in data:
        raise _fail(f"{field}.secret", "is missing: name the secret the workers hold")
    name, prefix = data["secret"], data.get("prefix", "")
    if not isinstance(name, str):
        raise _fail(f"{field}.secret", "must be a string (the name of a secret)")
    if not isinstance(prefix, str):
        raise _fail(f"{field}.prefix", "must be a string")
    return SecretRef(name=name, prefix=prefix)


def _parse_target(value: Any, field: str) -> Target:
    data = _mapping(value, field)
    kinds = [k for k in ("http", "kafka") if k in data]
    if len(kinds) != 1 or len(data) != 1:
        raise _fail(field, "needs exactly one of http or kafka")
    if kinds[0] == "http":
        http = _mapping(data["http"], f"{field}.http")
        for key in http:
            if key not in {"url", "method", "headers", "body", "timeout_seconds"}:
                raise _fail(f"{field}.http.{key}", "is not an http target field")
        body = http.get("body")
        if body is not None and not isinstance(body, str):
            body = json.dumps(body, separators=(",", ":"))
        return HttpTarget(
            url=_string(http.get("url"), f"{field}.http.url", max_length=MAX_URL_LENGTH),
            method=_string(http.get("method", "POST"), f"{field}.http.method", max_length=16),
            headers=_parse_headers(http.get("headers", {}), f"{field}.http.headers"),
            body=body,
            timeout=_seconds(http, "timeout_seconds", f"{field}.http.timeout_seconds", 30, 1, 900),
        )
    kafka = _mapping(data["kafka"], f"{field}.kafka")
    for key in kafka:
        if key not in {"topic", "key", "value"}:
            raise _fail(f"{field}.kafka.{key}", "is not a kafka target field")
    raw_value = kafka.get("value", "")
    if not isinstance(raw_value, str):
        raw_value = json.dumps(raw_value, separators=(",", ":"))
    key_value = kafka.get("key")
    return KafkaTarget(
        topic=_string(kafka.get("topic"), f"{field}.kafka.topic", max_length=249),
        value=raw_value,
        key=None if key_value is None else _string(key_value, f"{field}.kafka.key"),
    )


_DEFAULT_RETRY = RetryPolicy()


def _parse_retry(value: Any, field: str) -> RetryPolicy:
    if type(value) is dict and not value:
        return _DEFAULT_RETRY  # frozen: one shared instance for every job that sets no retry
    data = _mapping(value, field)
    for key in data:
        if key not in {
            "max_attempts",
            "initial_interval_seconds",
            "multiplier",
            "max_interval_seconds",
            "jitter",
        }:
            raise _fail(f"{field}.{key}", "is not a retry field")
    default = RetryPolicy()
    return RetryPolicy(
        max_attempts=int(
            _number(
                data.get("max_attempts", default.max_attempts),
                f"{field}.max_attempts",
                low=1,
                high=100,
            )
        ),
        initial_interval=_seconds(
            data,
            "initial_interval_seconds",
            f"{field}.initial_interval_seconds",
            default.initial_interval.total_seconds(),
            0.01,
            86_400,
        ),
        multiplier=_number(
            data.get("multiplier", default.multiplier),
            f"{field}.multiplier",
            low=1.0,
            high=10.0,
            integer=False,
        ),
        max_interval=_seconds(
            data,
            "max_interval_seconds",
            f"{field}.max_interval_seconds",
            default.max_interval.total_seconds(),
            0.01,
            7 * 86_400,
        ),
        jitter=_number(
            data.get("jitter", default.jitter), f"{field}.jitter", low=0.0, high=1.0, integer=False
        ),
    )


def default_target_service(target: Target) -> str:
    """The throttling key when a job names none: the URL's host, or ``kafka:<topic>``."""
    if isinstance(target, HttpTarget):
        try:
            host = urlsplit(target.url).hostname
        except ValueError:
            host = None  # an invalid URL: validate_job names the field
        return (host or "unknown").lower()
    return f"kafka:{target.topic}"


def parse_job(data: Any, field: str = "job") -> JobDefinition:
    """Turn one job object (from JSON or YAML) into a validated ``JobDefinition``."""
    obj = _mapping(data, field)
    for key in obj:
        if key not in _KNOWN_KEYS:
            raise _fail(f"{field}.{key}", "is not a job field")
    job_id = obj.get("id", obj.get("job_id"))
    target = _parse_target(obj.get("target"), f"{field}.target")
    job = JobDefinition(
        job_id=_string(job_id, f"{field}.id", max_length=200),
        schedule=_parse_schedule(obj.get("schedule"), f"{field}.schedule"),
        target=target,
        target_service=_string(
            obj.get("target_service", default_target_service(target)),
            f"{field}.target_service",
            max_length=200,
        ),
        tenant=_string(obj.get("tenant", "default"), f"{field}.tenant", max_length=63),
        window=_seconds(obj, "window_seconds", f"{field}.window_seconds", 0, 0, 86_400),
        catch_up=cast(
            Any, _choice(obj.get("catch_up", "once"), f"{field}.catch_up", ("once", "all", "skip"))
        ),
        max_catch_up=int(
            _number(obj.get("max_catch_up", 100), f"{field}.max_catch_up", low=1, high=10_000)
        ),
        overlap=cast(
            Any,
            _choice(
                obj.get("overlap", "allow"), f"{field}.overlap", ("allow", "skip", "buffer_one")
            ),
        ),
        retry=_parse_retry(obj.get("retry", {}), f"{field}.retry"),
        lease=_seconds(obj, "lease_seconds", f"{field}.lease_seconds", 60, 1, 3600),
        heartbeat_interval=_seconds(
            obj, "heartbeat_seconds", f"{field}.heartbeat_seconds", 20, 0.1, 1200
        ),
        paused=_flag(obj.get("paused", False), f"{field}.paused"),
        # 0 = "the stored version + 1", resolved when the job is written (CLI / API writes).
        version=int(_number(obj["version"], f"{field}.version", low=1, high=2**62))
        if "version" in obj
        else 0,
    )
    return validate_job(job, field)


def validate_job(job: JobDefinition, field: str = "job") -> JobDefinition:
    """Semantic checks shared by files, the API and the jobs topic."""
    if not JOB_ID_PATTERN.match(job.job_id):
        raise _fail(
            f"{field}.id", "use 1-200 characters from A-Z a-z 0-9 . _ - (first: letter or digit)"
        )
    if not TENANT_PATTERN.match(job.tenant):
        raise _fail(
            f"{field}.tenant", "use 1-63 characters from a-z 0-9 _ - (first: letter or digit)"
        )
    try:
        _VALIDATED.get(job.schedule)
    except InvalidInput as exc:
        # The expression's errors name the key it is written under (cron, interval or at).
        where = job.schedule.kind if exc.field == "schedule" else exc.field
        raise _fail(f"{field}.schedule.{where}", exc.reason) from exc
    _check_bounds(job, field)
    if job.heartbeat_interval >= job.lease:
        raise _fail(f"{field}.heartbeat_seconds", "must be shorter than lease_seconds")
    if job.retry.max_interval < job.retry.initial_interval:
        raise _fail(
            f"{field}.retry.max_interval_seconds",
            "must not be shorter than initial_interval_seconds",
        )
    _validate_target(job.target, f"{field}.target")
    return job


# The numeric bounds of a job, checked on every path (files, the API, the jobs topic): a record on
# the topic carries milliseconds and integers a file never could, such as a 1 ms lease.
_DAY = 86_400.0


def _check_bounds(job: JobDefinition, field: str) -> None:
    retry = job.retry
    seconds: list[tuple[str, timedelta, float, float]] = [
        ("window_seconds", job.window, 0, _DAY),
        ("lease_seconds", job.lease, 1, 3600),
        ("heartbeat_seconds", job.heartbeat_interval, 0.1, 1200),
        ("retry.initial_interval_seconds", retry.initial_interval, 0.01, _DAY),
        ("retry.max_interval_seconds", retry.max_interval, 0.01, 7 * _DAY),
    ]
    if isinstance(job.target, HttpTarget):
        seconds.append(("target.http.timeout_seconds", job.target.timeout, 1, 900))
    for name, value, low, high in seconds:
        _within(value.total_seconds(), f"{field}.{name}", low, high)
    _within(job.max_catch_up, f"{field}.max_catch_up", 1, 10_000)
    _within(retry.max_attempts, f"{field}.retry.max_attempts", 1, 100)
    _within(retry.multiplier, f"{field}.retry.multiplier", 1.0, 10.0)
    _within(retry.jitter, f"{field}.retry.jitter", 0.0, 1.0)
    _within(job.version, f"{field}.version", 0, 2**62)


def _within(value: float, field: str, low: float, high: float) -> None:
    if not low <= value <= high:  # also false for NaN
        raise _fail(field, f"must be between {low:g} and {high:g}, not {value:g}")


def _validate_target(target: Target, field: str) -> None:
    if isinstance(target, KafkaTarget):
        if not TOPIC_PATTERN.match(target.topic):
            raise _fail(f"{field}.kafka.topic", "use 1-249 characters from A-Z a-z 0-9 . _ -")
        reserved = reserved_topic(target.topic)
        if reserved is not None:
            raise _fail(f"{field}.kafka.topic", f"is reserved: {reserved}")
        if _text_size(target.value, f"{field}.kafka.value") > MAX_BODY_BYTES:
            raise _fail(f"{field}.kafka.value", f"is larger than {MAX_BODY_BYTES} bytes")
        return
    try:
        parts = urlsplit(target.url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise _fail(f"{field}.http.url", f"is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise _fail(f"{field}.http.url", "must be an http:// or https:// URL")
    if not parts.hostname:
        raise _fail(f"{field}.http.url", "has no host")
    if parts.username or parts.password:
        raise _fail(f"{field}.http.url", "must not carry credentials (user@host)")
    if len(target.url) > MAX_URL_LENGTH:
        raise _fail(f"{field}.http.url", f"is longer than {MAX_URL_LENGTH} characters")
    if target.method.upper() not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        raise _fail(f"{field}.http.method", "must be GET, POST, PUT, PATCH or DELETE")
    if target.body is not None and _text_size(target.body, f"{field}.http.body") > MAX_BODY_BYTES:
        raise _fail(f"{field}.http.body", f"is larger than {MAX_BODY_BYTES} bytes")
    total = 0
    for name, value in target.headers:
        if not _HEADER_NAME.match(name):
            raise _fail(f"{field}.http.headers", f"{name!r} is not a valid header name")
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith("x-duetime-"):
            raise _fail(
                f"{field}.http.headers.{name}", "is set by duetime and cannot be overridden"
            )
        if isinstance(value, SecretRef):
            _validate_secret_ref(value, f"{field}.http.headers.{name}")
            text = value.prefix
            total += len(value.name)
        elif is_credential_header(name):
            # The reason never quotes the value: it goes to jobs.rejected and to logs.
            raise _fail(
                f"{field}.http.headers.{name}",
                "carries a credential, and a job definition must not hold one (it is stored "
                "and sent on the topics in clear): name a secret the workers hold instead, "
                f'such as {_SECRET_EXAMPLE} (docs/targets.md, "Secrets")',
            )
        else:
            if any(ch in value for ch in "\r\n\x00"):
                raise _fail(f"{field}.http.headers.{name}", "must not contain CR, LF or NUL")
            _text_size(value, f"{field}.http.headers.{name}")
            text = value
        total += len(name) + len(text)
    if total > MAX_HEADER_BYTES:
        raise _fail(f"{field}.http.headers", f"are larger than {MAX_HEADER_BYTES} bytes in total")


def _validate_secret_ref(ref: SecretRef, field: str) -> None:
    if not SECRET_NAME_PATTERN.match(ref.name):
        raise _fail(
            f"{field}.secret",
            "use 1-128 characters from A-Z a-z 0-9 . _ - (first: letter or digit)",
        )
    if len(ref.prefix) > MAX_SECRET_PREFIX:
        raise _fail(f"{field}.prefix", f"is longer than {MAX_SECRET_PREFIX} characters")
    if any(ch in ref.prefix for ch in "\r\n\x00"):
        raise _fail(f"{field}.prefix", "must not contain CR, LF or NUL")
    _text_size(ref.prefix, f"{field}.prefix")


def parse_jobs(document: Any) -> list[JobDefinition]:
    """Accept one job object, a list of them, or ``{"jobs": [...]}``; refuse duplicates."""
    if isinstance(document, Mapping) and "jobs" in document:
        items, prefix = document["jobs"], "jobs"
        if not isinstance(items, list):
            raise _fail("jobs", "must be a list")
    elif isinstance(document, list):
        items, prefix = document, "jobs"
    else:
        items, prefix = [document], ""
    jobs: list[JobDefinition] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        field = f"{prefix}[{index}]" if prefix else "job"
        job = parse_job(item, field)
        if job.job_id in seen:
            raise _fail(f"{field}.id", f"{job.job_id!r} appears twice in the file")
        seen.add(job.job_id)
        jobs.append(job)
    if not jobs:
        raise _fail("jobs", "the file defines no job")
    return jobs


# libyaml's loader when PyYAML was built with it (its wheels are): the same safe subset of YAML,
# parsed in C. The pure-Python loader took 80 s for a file of 100k jobs, the C one a few seconds.
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_job_file(path: Path) -> list[JobDefinition]:
    """Read a .json, .yaml or .yml file of job definitions."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput("file", f"cannot read {path}: {exc}") from exc
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.load(text, _YAML_LOADER)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InvalidInput(
            "file",
            f"{path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {str(exc).splitlines()[0]}",
        ) from exc
    return parse_jobs(document)


def with_version(job: JobDefinition, version: int) -> JobDefinition:
    return replace(job, version=version)
