"""RunTemplate writes exactly the bytes of the RunEvent codec, and RunDecoder reads back exactly
what the codec reads, for any run of any job; bad records fail the same way."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.bus.codec import SCHEMA_HEADER
from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_template import RunDecoder, RunTemplate
from duetime.errors import CodecError
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
    # The decoder: the first run of the job decodes whole, the next one from the known tail.
    decoder = RunDecoder()
    assert decoder.decode(data) == RUN_EVENTS.decode(data)
    other = template.encode(str(uuid.uuid4()), run.due_at, run.scheduled_for, attempt)
    assert decoder.decode(other) == RUN_EVENTS.decode(other)


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


def test_the_decoder_fails_where_the_codec_fails() -> None:
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
    decoder = RunDecoder()
    decoder.decode(good)  # the tail is known from here on
    bad_run_id = template.encode("not-a-uuid", at, at, 1)
    truncated = good[:-3]
    trailing = good + b"\x00"
    cut_head = good[:10]
    for data in (bad_run_id, truncated, trailing, cut_head, b"", b"\xff" * 12, None):
        with pytest.raises(CodecError):
            RUN_EVENTS.decode(data)
        with pytest.raises(CodecError):
            decoder.decode(data)
    with pytest.raises(CodecError, match="schema fingerprint"):
        decoder.decode(good, [(SCHEMA_HEADER, b"0000")])
    # A full memory starts afresh rather than growing.
    small = RunDecoder(max_jobs=1)
    for i in range(3):
        t = RunTemplate(
            job_id=f"job-{i}",
            tenant="acme",
            max_attempts=3,
            target_service="svc",
            target=KafkaTarget(topic="events", key=None, value=str(i)),
            lease=timedelta(seconds=60),
            heartbeat_interval=timedelta(seconds=20),
            retry=RetryPolicy(max_attempts=3),
        )
        data = t.encode(str(uuid.uuid4()), at, at, 1)
        assert small.decode(data) == RUN_EVENTS.decode(data)
