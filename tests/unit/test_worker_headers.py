"""The headers every target receives, and which job headers are dropped or rejected."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from duetime_workers.headers import (
    InvalidHeader,
    duetime_headers,
    format_instant,
    http_headers,
    kafka_headers,
)

RUN_ID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")
SCHEDULED = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def _build(job_headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return http_headers(
        job_headers,
        run_id=RUN_ID,
        attempt=2,
        fencing_token=4,
        scheduled_for=SCHEDULED,
        user_agent="duetime-worker/1.2.3",
    )


def test_duetime_headers_carry_the_idempotency_key_and_the_fencing_token() -> None:
    assert duetime_headers(RUN_ID, 2, 4, SCHEDULED) == [
        ("Idempotency-Key", f"{RUN_ID}:2"),
        ("X-Duetime-Run-Id", str(RUN_ID)),
        ("X-Duetime-Attempt", "2"),
        ("X-Duetime-Fencing-Token", "4"),
        ("X-Duetime-Scheduled-For", "2026-03-29T01:30:00Z"),
    ]


def test_instants_are_utc_with_z() -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    assert format_instant(datetime(2026, 1, 1, 5, 30, tzinfo=ist)) == "2026-01-01T00:00:00Z"
    assert format_instant(SCHEDULED.replace(microsecond=250)) == "2026-03-29T01:30:00.000250Z"
    with pytest.raises(ValueError, match="aware"):
        format_instant(datetime(2026, 1, 1))


def test_job_headers_come_first_and_duetime_adds_its_own() -> None:
    headers = _build([("Authorization", "Bearer t"), ("Content-Type", "application/json")])
    assert headers[:2] == [("Authorization", "Bearer t"), ("Content-Type", "application/json")]
    assert dict(headers)["User-Agent"] == "duetime-worker/1.2.3"
    assert dict(headers)["Idempotency-Key"] == f"{RUN_ID}:2"


@pytest.mark.parametrize(
    "name",
    [
        "Idempotency-Key",
        "idempotency-key",
        "X-Duetime-Run-Id",
        "X-Duetime-Fencing-Token",
        "x-duetime-anything",
        "User-Agent",
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Upgrade",
    ],
)
def test_reserved_job_headers_are_dropped(name: str) -> None:
    headers = _build([(name, "forged")])
    assert "forged" not in [v for _, v in headers], headers


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-Ok", "a\r\nX-Injected: 1"),
        ("X-Ok", "a\nb"),
        ("X-Ok", "nul\x00"),
        ("Bad Name", "v"),
        ("Bad:Name", "v"),
        ("", "v"),
    ],
)
def test_header_injection_is_rejected(name: str, value: str) -> None:
    with pytest.raises(InvalidHeader):
        _build([(name, value)])


def test_kafka_headers_are_the_same_keys_as_bytes() -> None:
    assert kafka_headers(RUN_ID, 1, 2, SCHEDULED) == [
        ("Idempotency-Key", f"{RUN_ID}:1".encode()),
        ("X-Duetime-Run-Id", str(RUN_ID).encode()),
        ("X-Duetime-Attempt", b"1"),
        ("X-Duetime-Fencing-Token", b"2"),
        ("X-Duetime-Scheduled-For", b"2026-03-29T01:30:00Z"),
    ]
    # The same instant in another zone, and from the formatted-instant memory: the same header.
    local = SCHEDULED.astimezone(ZoneInfo("Europe/London"))
    for at in (SCHEDULED, local):
        assert kafka_headers(RUN_ID, 3, 4, at) == [
            (k, v.encode()) for k, v in duetime_headers(RUN_ID, 3, 4, SCHEDULED)
        ]
