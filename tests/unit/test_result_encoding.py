"""encode_result and ResultTemplate write exactly the bytes of the RunResult codec, for any
result."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.bus.records import RUN_RESULTS
from duetime.bus.result_encoding import ResultTemplate, encode_result
from duetime.events import RunResult

_instants = st.datetimes(
    min_value=datetime(1960, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, ZoneInfo("America/New_York"), ZoneInfo("Asia/Kolkata")]),
)
_results = st.builds(
    RunResult,
    run_id=st.uuids(),
    job_id=st.text(min_size=1, max_size=30),
    tenant=st.text(max_size=10),
    target_service=st.text(max_size=20),
    scheduled_for=_instants,
    attempt=st.integers(0, 2**31 - 1),
    worker=st.text(max_size=30),
    outcome=st.sampled_from(["succeeded", "failed", "fenced", "handed_back"]),
    state=st.sampled_from(["succeeded", "scheduled", "dead", "unknown"]),
    started_at=_instants,
    finished_at=_instants,
    error=st.one_of(st.none(), st.text(max_size=60)),
    status_code=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
)


@settings(max_examples=300, deadline=None)
@given(result=_results)
def test_encode_result_writes_the_codecs_bytes(result: RunResult) -> None:
    assert encode_result(result) == RUN_RESULTS.encode(result)


@settings(max_examples=300, deadline=None)
@given(result=_results)
def test_the_template_writes_the_codecs_bytes_for_its_worker_outcome_and_state(
    result: RunResult,
) -> None:
    plain = RunResult(**{**result.__dict__, "error": None, "status_code": None})
    template = ResultTemplate(worker=plain.worker, outcome=plain.outcome, state=plain.state)
    data = template.encode(
        str(plain.run_id),
        plain.job_id,
        plain.tenant,
        plain.target_service,
        plain.scheduled_for,
        plain.attempt,
        plain.started_at,
        plain.finished_at,
    )
    assert data == RUN_RESULTS.encode(plain)


@settings(max_examples=50, deadline=None)
@given(result=_results, naive=st.datetimes(min_value=datetime(1960, 1, 1)))
def test_an_instant_without_a_zone_goes_through_the_codec(
    result: RunResult, naive: datetime
) -> None:
    for zoneless in (
        replace(result, scheduled_for=naive),
        replace(result, started_at=naive),
        replace(result, finished_at=naive),
    ):
        assert encode_result(zoneless) == RUN_RESULTS.encode(zoneless)
