"""The worker's RunDecoder accepts and refuses exactly what the whole-record decode does: equal
RunEvents for any run of any job once the job's tail is known, the same CodecError otherwise."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastavro import schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.bus.records import RUN_EVENTS
from duetime.bus.run_template import RunTemplate
from duetime.errors import CodecError
from duetime.model import HttpTarget, KafkaTarget, RunEvent
from duetime.schedule import RetryPolicy
from duetime_workers.decoding import RunDecoder, decode_run

_HEADERS = [(k, v.encode() if isinstance(v, str) else v) for k, v in RUN_EVENTS.headers()]
_TARGETS = [
    HttpTarget(url="http://127.0.0.1:8080/hook", headers=(("x-a", "1"),), body="{}"),
    KafkaTarget(topic="events", key="k", value="v"),
]


def _template(job_id: str, target: HttpTarget | KafkaTarget, max_attempts: int) -> RunTemplate:
    return RunTemplate(
        job_id=job_id,
        tenant="team",
        max_attempts=max_attempts,
        target_service="svc",
        target=target,
        lease=timedelta(seconds=30),
        heartbeat_interval=timedelta(seconds=10),
        retry=RetryPolicy(max_attempts=max_attempts, multiplier=1.5),
    )


def _outcome(decode: object, data: bytes | None, headers: object = _HEADERS) -> object:
    try:
        return decode(data, headers)  # type: ignore[operator]
    except CodecError as exc:
        return ("refused", str(exc))


@settings(max_examples=200, deadline=None)
@given(
    runs=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from([0, 1]),
            st.integers(-(2**40), 2**52),
            st.integers(0, 10**9),
            st.integers(-2, 6),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_equal_to_the_whole_decode_for_every_run(
    runs: list[tuple[str, int, int, int, int]],
) -> None:
    decoder = RunDecoder()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for job_id, target, scheduled_us, jitter_us, attempt in runs:
        scheduled = epoch + timedelta(microseconds=scheduled_us)
        data = _template(job_id, _TARGETS[target], 3).encode(
            str(uuid.uuid4()), scheduled, scheduled + timedelta(microseconds=jitter_us), attempt
        )
        # Attempts outside 1..max_attempts are refused with the whole decode's words.
        assert _outcome(decoder.decode, data) == _outcome(decode_run, data)


def test_a_known_jobs_run_with_a_bad_head_or_schema_is_refused_as_before() -> None:
    decoder = RunDecoder()
    template = _template("job", _TARGETS[0], 3)
    now = datetime.now(UTC)
    first = template.encode(str(uuid.uuid4()), now, now, 1)
    decoder.decode(first, _HEADERS)  # the job's tail is known from here on
    not_a_uuid = template.encode("not-a-uuid", now, now, 1)
    too_late = template.encode(str(uuid.uuid4()), now, now, 4)
    cut = first[:10]
    for data in (not_a_uuid, too_late, cut, None):
        outcome = _outcome(decoder.decode, data)
        assert outcome == _outcome(decode_run, data)
        assert isinstance(outcome, tuple) and outcome[0] == "refused"
    wrong_schema = [("duetime-schema", b"0000")]
    with pytest.raises(CodecError, match="unknown schema fingerprint"):
        decoder.decode(first, wrong_schema)


def test_a_tail_the_codec_refuses_is_never_remembered() -> None:
    record = RUN_EVENTS._to_record(
        RunEvent(
            run_id=uuid.uuid4(),
            job_id="job",
            tenant="team",
            scheduled_for=datetime.now(UTC),
            due_at=datetime.now(UTC),
            attempt=1,
            max_attempts=3,
            target_service="svc",
            target=_TARGETS[0],
            lease=timedelta(seconds=30),
            heartbeat_interval=timedelta(seconds=10),
        )
    )
    record["lease_ms"] = 0  # Avro carries it; the worker refuses a lease that is not positive
    buffer = io.BytesIO()
    schemaless_writer(buffer, RUN_EVENTS.schema, record)
    decoder = RunDecoder()
    for _ in range(2):
        with pytest.raises(CodecError, match="lease must be positive"):
            decoder.decode(buffer.getvalue(), _HEADERS)
