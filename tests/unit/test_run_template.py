"""RunTemplate writes exactly the bytes of the RunEvent codec, and read_head reads back exactly
the per-run fields the codec reads, for any run of any job. (The dispatcher's use of read_head,
including records the codec refuses: tests/unit/test_dispatcher_fast_path.py.)"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_template import RunTemplate, read_head
from duetime.model import HttpTarget, KafkaTarget, RunEvent, SecretRef
from duetime.schedule import RetryPolicy

_instants = st.datetimes(
    min_value=datetime(1960, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, ZoneInfo("America/New_York"), ZoneInfo("Asia/Kolkata")]),
)
# A header's value is a literal or a reference to a secret (the union in duetime.HttpTarget.avsc).
_header_values = st.one_of(
    st.text(max_size=8),
    st.builds(SecretRef, name=st.text(max_size=8), prefix=st.text(max_size=8)),
)
_targets = st.one_of(
    st.builds(
        HttpTarget,
        url=st.text(min_size=1, max_size=40),
        method=st.sampled_from(["GET", "POST"]),
        headers=st.lists(st.tuples(st.text(max_size=8), _header_values), max_size=3).map(tuple),
        body=st.one_of(st.none(), st.text(max_size=50)),
        timeout=st.integers(1, 10**6).map(lambda ms: timedelta(milliseconds=ms)),
    ),
    st.builds(
        KafkaTarget,
        topic=st.text(min_size=1, max_size=20),
        key=st.one_of(st.none(), st.text(max_size=20)),
        value=st.text(max_size=50),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    job_id=st.text(min_size=1, max_size=30),
    tenant=st.text(max_size=10),
    target=_targets,
    scheduled_for=_instants,
    jitter_us=st.integers(0, 10**10),
    attempt=st.integers(1, 2**31 - 1),
    max_attempts=st.integers(1, 100),
    lease_ms=st.integers(1, 10**9),
    multiplier=st.floats(1.0, 10.0),
)
def test_template_bytes_equal_the_codec(
    job_id: str,
    tenant: str,
    target: HttpTarget | KafkaTarget,
    scheduled_for: datetime,
    jitter_us: int,
    attempt: int,
    max_attempts: int,
    lease_ms: int,
    multiplier: float,
) -> None:
    retry = RetryPolicy(max_attempts=max_attempts, multiplier=multiplier)
    run = RunEvent(
        run_id=uuid.uuid4(),
        job_id=job_id,
        tenant=tenant,
        scheduled_for=scheduled_for,
        due_at=scheduled_for + timedelta(microseconds=jitter_us),
        attempt=attempt,
        max_attempts=max_attempts,
        target_service="svc",
        target=target,
        lease=timedelta(milliseconds=lease_ms),
        heartbeat_interval=timedelta(milliseconds=lease_ms // 3 + 1),
        retry=retry,
    )
    template = RunTemplate(
        job_id=job_id,
        tenant=tenant,
        max_attempts=max_attempts,
        target_service="svc",
        target=target,
        lease=run.lease,
        heartbeat_interval=run.heartbeat_interval,
        retry=retry,
    )
    data = template.encode(str(run.run_id), run.scheduled_for, run.due_at, attempt)
    assert data == RUN_EVENTS.encode(run)
    assert RUN_EVENTS.decode(data) == RUN_EVENTS.decode(RUN_EVENTS.encode(run))
    # The head: the per-run fields as the codec reads them, then the job's tail, the same
    # bytes for every run of the job.
    run_text, job, tenant_read, scheduled_us, due_us, attempt_read, tail_at = read_head(data)
    decoded = RUN_EVENTS.decode(data)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert (run_text, job, tenant_read, attempt_read) == (
        str(run.run_id).encode(),
        decoded.job_id,
        decoded.tenant,
        decoded.attempt,
    )
    assert epoch + timedelta(microseconds=scheduled_us) == decoded.scheduled_for
    assert epoch + timedelta(microseconds=due_us) == decoded.due_at
    other = template.encode(str(uuid.uuid4()), run.due_at, run.scheduled_for, attempt)
    assert other[read_head(other)[-1] :] == data[tail_at:]


@pytest.mark.parametrize(
    "target",
    [
        KafkaTarget(topic="events", key="k", value="{}"),
        HttpTarget(
            url="https://billing.example.com/run",
            headers=(
                ("X-Team", "billing"),
                ("Authorization", SecretRef(name="billing-api-token", prefix="Bearer ")),
            ),
        ),
    ],
    ids=["kafka", "http-with-secret-reference"],
)
def test_one_template_serves_every_run_of_its_job(target: HttpTarget | KafkaTarget) -> None:
    template = RunTemplate(
        job_id="job-1",
        tenant="acme",
        max_attempts=3,
        target_service="svc",
        target=target,
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
        retry=RetryPolicy(max_attempts=3),
    )
    start = datetime(2026, 3, 29, 0, 59, 59, 999_999, tzinfo=UTC)
    decoded = []
    for i in range(3):
        at = start + timedelta(seconds=i)
        decoded.append(RUN_EVENTS.decode(template.encode(str(uuid.uuid4()), at, at, i + 1)))
    assert [d.attempt for d in decoded] == [1, 2, 3]
    assert [d.scheduled_for for d in decoded] == [start + timedelta(seconds=i) for i in range(3)]
    assert {d.job_id for d in decoded} == {"job-1"} and {d.target for d in decoded} == {target}


def test_a_head_that_does_not_parse_raises() -> None:
    template = RunTemplate(
        job_id="job-1",
        tenant="acme",
        max_attempts=3,
        target_service="svc",
        target=KafkaTarget(topic="events", key="k", value="{}"),
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
        retry=RetryPolicy(max_attempts=3),
    )
    at = datetime(2026, 12, 4, tzinfo=UTC)
    good = template.encode(str(uuid.uuid4()), at, at, 1)
    for data in (good[:10], b"", b"\xff" * 12, good[:37] + b"\x06\xff\xfe\xfd" + good[41:]):
        with pytest.raises((ValueError, IndexError)):
            read_head(data)


def _kafka_template() -> RunTemplate:
    return RunTemplate(
        job_id="job-1",
        tenant="acme",
        max_attempts=3,
        target_service="svc",
        target=KafkaTarget(topic="orders", key=None, value="x"),
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
        retry=RetryPolicy(max_attempts=3),
    )


def test_instants_encode_the_same_when_remembered_in_any_zone_and_past_the_bound() -> None:
    """Encoded instants are remembered by instant: one instant in another zone, and instants
    encoded again after the memory was emptied, give the codec's bytes; a naive one is refused."""
    template = _kafka_template()
    start = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    new_york = ZoneInfo("America/New_York")
    # More distinct instants than are remembered, each once in UTC and once in New York's zone.
    for i in range(5000):
        at = start + timedelta(seconds=i, microseconds=i)
        for instant in (at, at.astimezone(new_york)):
            decoded = RUN_EVENTS.decode(template.encode(str(uuid.uuid4()), instant, at, 1))
            assert (decoded.scheduled_for, decoded.due_at) == (at, at)
    with pytest.raises(ValueError):
        template.encode(str(uuid.uuid4()), start.replace(tzinfo=None), start, 1)


def test_the_two_instants_of_a_dst_overlap_encode_apart() -> None:
    """01:30 on New York's fall-back night happens twice; the two datetimes are equal in
    Python (same zone, different ``fold``) and must still encode as the hour apart they are."""
    template = _kafka_template()
    first = datetime(2026, 11, 1, 1, 30, tzinfo=ZoneInfo("America/New_York"))
    second = first.replace(fold=1)
    assert first == second
    for instant in (first, second, first, second):
        decoded = RUN_EVENTS.decode(template.encode(str(uuid.uuid4()), instant, instant, 1))
        assert decoded.scheduled_for == instant.astimezone(UTC)
    assert second.astimezone(UTC) - first.astimezone(UTC) == timedelta(hours=1)
