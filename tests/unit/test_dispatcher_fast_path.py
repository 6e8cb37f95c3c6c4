"""The Kafka fast path's pure planning and its batched recording, with fakes for the I/O."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from duetime.bus.codec import SCHEMA_HEADER as SCHEMA
from duetime.bus.records import RUN_EVENTS, RUN_RESULTS
from duetime.bus.run_headers import routing_headers
from duetime.bus.run_template import RunTemplate, read_head
from duetime.errors import StoreError
from duetime.flow import TargetLimit
from duetime.model import HttpTarget, KafkaTarget, RunEvent, Target
from duetime.store.flow import GrantRequest
from duetime_dispatcher.fast_path import Emission, EmissionPlanner
from duetime_dispatcher.holding import Release, Source
from duetime_dispatcher.ledger import Claim
from duetime_dispatcher.recorder import RESULTS_MOST_WAIT, EmittedRecorder
from duetime_dispatcher.routing import Routed, route_record

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def run_event(target: Target, run_id: uuid.UUID | None = None) -> RunEvent:
    return RunEvent(
        run_id=run_id or uuid.uuid4(),
        job_id="job-1",
        tenant="acme",
        scheduled_for=T0,
        due_at=T0,
        attempt=1,
        max_attempts=3,
        target_service="kafka:orders",
        target=target,
        lease=60 * S,
        heartbeat_interval=20 * S,
    )


def plan_emission(record: Routed, prefix: str) -> tuple[Routed, str | None]:
    """A fresh planner's plan: the first record of a job, decoded whole by the codec."""
    return EmissionPlanner(prefix).plan(record)


def routed(run: RunEvent, kind: str = "kafka", value: bytes | None = None) -> Routed:
    headers = [*routing_headers(run.run_id, run.attempt, run.due_at, kind, T0)]
    return route_record(value or RUN_EVENTS.encode(run), [*headers, *RUN_EVENTS.headers()])  # type: ignore[list-item]


def test_a_kafka_target_is_planned_before_its_due_instant() -> None:
    run = run_event(KafkaTarget(topic="orders", key="o-7", value='{"bill": true}'))
    planned, skipped = plan_emission(routed(run), "duetime.")
    assert skipped is None and planned.emission is not None
    emission = planned.emission
    assert (emission.topic, emission.key, emission.value) == ("orders", b"o-7", b'{"bill": true}')
    assert dict(emission.headers) == {
        "Idempotency-Key": f"{run.run_id}:1".encode(),
        "X-Duetime-Run-Id": str(run.run_id).encode(),
        "X-Duetime-Attempt": b"1",
        # One below the token of a worker's execution of attempt 1 (2): a run the fast path
        # gives up to a worker reaches the target with a higher token.
        "X-Duetime-Fencing-Token": b"1",
        "X-Duetime-Scheduled-For": b"2026-12-02T00:00:00Z",
    }
    assert (emission.run_id, emission.attempt, emission.scheduled_for) == (run.run_id, 1, T0)
    assert (emission.job_id, emission.tenant, emission.target_service) == (
        "job-1",
        "acme",
        "kafka:orders",
    )


def test_a_later_attempt_on_the_fast_path_is_fenced_above_the_earlier_ones() -> None:
    run = replace(run_event(KafkaTarget(topic="orders", key=None, value="x")), attempt=3)
    planned, _ = plan_emission(routed(run), "duetime.")
    assert planned.emission is not None
    assert dict(planned.emission.headers)["X-Duetime-Fencing-Token"] == b"5"


def test_http_targets_are_left_alone() -> None:
    run = run_event(HttpTarget(url="https://example.com/"))
    record = routed(run, kind="http")
    assert plan_emission(record, "duetime.") == (record, None)


def test_what_cannot_take_the_fast_path_goes_to_runs_ready_with_a_reason() -> None:
    refused = routed(run_event(KafkaTarget(topic="duetime.runs.ready", key=None, value="x")))
    internal = routed(run_event(KafkaTarget(topic="__consumer_offsets", key=None, value="x")))
    lying = routed(run_event(HttpTarget(url="https://example.com/")), kind="kafka")
    garbage = routed(run_event(KafkaTarget(topic="t", key=None, value="")), value=b"\x02\x99")
    other = run_event(KafkaTarget(topic="orders", key=None, value="x"))
    mismatched = route_record(
        RUN_EVENTS.encode(other),
        [*routing_headers(uuid.uuid4(), 1, T0, "kafka", T0), *RUN_EVENTS.headers()],  # type: ignore[list-item]
    )
    for record, why in [
        (refused, "internal to duetime"),
        (internal, "internal to Kafka"),
        (lying, "the value does not"),
        (garbage, "not valid Avro"),
        (mismatched, "different runs"),
    ]:
        planned, skipped = plan_emission(record, "duetime.")
        assert planned.emission is None
        assert skipped is not None and why in skipped


class FakeStore:
    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, ...]]] = []
        self.handled: set[tuple[str, int]] = set()
        self.fail = False

    def runs_emitted(self, worker: str, emitted: Sequence[tuple[Any, ...]]) -> set[tuple[str, int]]:
        if self.fail:
            raise StoreError("database error: connection refused")
        self.calls.append(list(emitted))
        fresh = {(row[0], row[2]) for row in emitted} - self.handled
        self.handled |= fresh
        return fresh

    def db_clock(self) -> datetime:
        return T0

    def targets_grant(self, requests: Sequence[GrantRequest]) -> dict[str, int]:
        return {r.target_service: len(r.candidates) for r in requests}

    def flow_settings(self) -> tuple[dict[str, TargetLimit], dict[str, int]]:
        return {}, {}

    def targets_report_waiting(self, dispatcher: str, waiting: Mapping[str, int]) -> None:
        return None


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, headers: Any = None) -> None:
        self.sent.append((topic, value, key))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def new_recorder(
    store: FakeStore, producer: FakeProducer, chunk: int = 5000
) -> EmittedRecorder[str]:
    return EmittedRecorder(
        store,
        producer,  # type: ignore[arg-type]
        "duetime.runs.results",
        "dispatcher:host-1",
        chunk=chunk,
    )


def release_of(run: RunEvent, offset: int) -> tuple[Release[str], Emission]:
    planned, _ = plan_emission(routed(run), "duetime.")
    assert planned.emission is not None
    claim: Claim[str] = Claim(("runs.due.10s", 0), offset, f"token-{offset}")
    release = Release(planned, Source("runs.due.10s", 0, offset), T0, claim, planned.key)
    return release, planned.emission


def test_the_recorder_writes_in_chunks_publishes_results_and_releases_for_acking() -> None:
    store, producer = FakeStore(), FakeProducer()
    recorder = new_recorder(store, producer, chunk=2)
    runs = [run_event(KafkaTarget(topic="orders", key=None, value="x")) for _ in range(3)]
    releases = [release_of(run, n) for n, run in enumerate(runs)]
    store.handled.add((str(runs[1].run_id), 1))  # a worker got there first: left alone, no result
    for release, emission in releases:
        recorder.add(release, emission, T0 + S)
    written = asyncio.run(recorder.flush())
    assert written == [release for release, _ in releases]  # all may be acked now
    assert [len(call) for call in store.calls] == [2, 1]
    # (run, scheduled_for, attempt, released at, finished at, throttled ms)
    assert store.calls[0][0] == (str(runs[0].run_id), T0, 1, T0, T0 + S, 0)
    assert (recorder.recorded, recorder.already_handled) == (2, 1)
    # The result records wait for the dispatcher to call for them (once releases pause).
    assert producer.sent == [] and recorder.results_due == 2
    assert asyncio.run(recorder.publish_results(1)) == 1
    assert asyncio.run(recorder.publish_results(10)) == 1
    assert recorder.results_due == 0
    results = [RUN_RESULTS.decode(value) for _, value, _ in producer.sent]
    assert [r.run_id for r in results] == [runs[0].run_id, runs[2].run_id]
    assert {(r.state, r.worker) for r in results} == {("succeeded", "dispatcher:host-1")}


def test_results_wait_for_a_pause_in_releases_but_not_for_ever() -> None:
    """A spike's result records wait until its releases pause; releases that never pause (a run
    due every few ms) hold them at most a second, not for ever."""
    store, producer = FakeStore(), FakeProducer()
    recorder = new_recorder(store, producer)
    ms = timedelta(milliseconds=1)
    assert not recorder.results_may_go(T0, T0 - S)  # nothing waiting
    release, emission = release_of(run_event(KafkaTarget(topic="orders", key=None, value="x")), 0)
    recorder.add(release, emission, T0)
    asyncio.run(recorder.flush())
    assert recorder.results_due == 1
    assert recorder.results_may_go(T0, T0 - 300 * ms)  # releases paused
    # Releases 10 ms apart, going on: the results wait, up to a second from when first seen.
    rounds = [T0 + n * 25 * ms for n in range(100)]  # record rounds, 25 ms apart
    first = next((now for now in rounds if recorder.results_may_go(now, now - 10 * ms)), None)
    assert first == T0 + RESULTS_MOST_WAIT
    now = first
    assert asyncio.run(recorder.publish_results(10)) == 1
    assert not recorder.results_may_go(now, now)
    # The next ones wait their own second, not the last ones'.
    recorder.add(*release_of(run_event(KafkaTarget(topic="orders", key=None, value="x")), 1), now)
    asyncio.run(recorder.flush())
    assert not recorder.results_may_go(now + 25 * ms, now + 15 * ms)
    assert recorder.results_may_go(now + 25 * ms + RESULTS_MOST_WAIT, now + RESULTS_MOST_WAIT)


def test_a_failed_write_keeps_the_runs_unacked_for_the_next_flush() -> None:
    store, producer = FakeStore(), FakeProducer()
    recorder = new_recorder(store, producer)
    release, emission = release_of(run_event(KafkaTarget(topic="o", key=None, value="x")), 0)
    recorder.add(release, emission, T0 + S)
    store.fail = True
    assert asyncio.run(recorder.flush()) == []
    assert recorder.pending == 1 and recorder.write_failures == 1
    store.fail = False
    assert asyncio.run(recorder.flush()) == [release]
    assert recorder.pending == 0


@pytest.mark.parametrize("topic", ["jobs", "jobs.rejected", "runs.ready", "runs.due.0s"])
def test_without_a_topic_prefix_duetimes_own_topics_are_still_refused(topic: str) -> None:
    record = routed(run_event(KafkaTarget(topic=topic, key=None, value="x")))
    planned, skipped = plan_emission(record, "")
    assert planned.emission is None
    assert skipped is not None and "duetime's own topics" in skipped


def test_without_a_topic_prefix_other_topics_take_the_fast_path() -> None:
    record = routed(run_event(KafkaTarget(topic="jobs-of-the-day", key=None, value="x")))
    planned, skipped = plan_emission(record, "")
    assert skipped is None and planned.emission is not None


def _template_of(run: RunEvent) -> RunTemplate:
    return RunTemplate(
        job_id=run.job_id,
        tenant=run.tenant,
        max_attempts=run.max_attempts,
        target_service=run.target_service,
        target=run.target,
        lease=run.lease,
        heartbeat_interval=run.heartbeat_interval,
        retry=run.retry,
    )


def _record(run: RunEvent, value: bytes | None = None, **changes: Any) -> Routed:
    """``run``'s due record as the planner writes it (template bytes, routing headers)."""
    run = replace(run, **changes)
    data = _template_of(run).encode(str(run.run_id), run.scheduled_for, run.due_at, run.attempt)
    return routed(run, value=value if value is not None else data)


def test_a_jobs_later_records_plan_what_the_codec_would_plan() -> None:
    """The first record of a job is decoded whole; the later ones from their head and the known
    tail. Each plans exactly what a fresh planner (the codec's whole decode) plans for it."""
    planner = EmissionPlanner("duetime.")
    first = run_event(KafkaTarget(topic="orders", key="o-7", value='{"bill": true}'))
    planner.plan(_record(first))
    for n, (attempt, scheduled) in enumerate(
        [(1, T0 + S), (2, T0 + 2 * S), (7, T0 + timedelta(microseconds=123_457)), (1, T0 + S)]
    ):
        record = _record(
            first, run_id=uuid.uuid4(), attempt=attempt, scheduled_for=scheduled, due_at=scheduled
        )
        copy = replace(record)  # planning sets the record's emission in place
        planned, skipped = planner.plan(record)
        assert skipped is None and planned.emission is not None, n
        by_codec = plan_emission(copy, "duetime.")[0]
        assert by_codec.emission is not None and by_codec.emission.headers[0][0] == (
            "Idempotency-Key"
        )
        assert planned.emission == by_codec.emission
        assert planned == by_codec
        assert dict(planned.emission.headers)["X-Duetime-Fencing-Token"] == b"%d" % (
            2 * attempt - 1
        )


def test_a_known_jobs_bad_records_fail_where_the_codec_fails() -> None:
    planner = EmissionPlanner("duetime.")
    run = run_event(KafkaTarget(topic="orders", key=None, value="x"))
    good = _record(run)
    planner.plan(good)  # the job's tail is known from here on
    other = replace(run, run_id=uuid.uuid4())
    data = _record(other).value
    # An instant beyond what a datetime holds (the codec refuses it), though the fast path
    # does not use it: the due instant's varint replaced by that of about -2**62 µs.
    attempt_at = read_head(data)[-1] - 1
    far = b"\xff" * 8 + b"\x7f"
    due_beyond = data[: attempt_at - 8] + far + data[attempt_at:]
    scheduled_beyond = data[: attempt_at - 16] + far + data[attempt_at - 8 :]
    for record, why in [
        (_record(other, value=due_beyond), "not valid Avro"),
        (_record(other, value=scheduled_beyond), "not valid Avro"),
        (_record(other, value=data[:-3]), "not valid Avro"),
        (_record(other, value=data + b"\x00"), "trailing bytes"),
        (_record(other, value=data[:10]), "not valid Avro"),
        (_record(other, value=data[:37] + b"\x06\xff\xfe\xfd" + data[41:]), "not valid Avro"),
        (_record(other, value=_record(replace(other, run_id=uuid.uuid4())).value), "different"),
        (_record(other, value=_record(other, attempt=2).value), "different runs"),
        (
            replace(_record(other), headers=[*_record(other).headers[:-1], (SCHEMA, b"0")]),
            "schema fingerprint",
        ),
    ]:
        planned, skipped = planner.plan(record)
        assert planned.emission is None and skipped is not None and why in skipped, why
    planned, skipped = planner.plan(_record(other))
    assert skipped is None and planned.emission is not None


def test_a_full_memory_of_jobs_starts_afresh() -> None:
    planner = EmissionPlanner("duetime.", max_jobs=1)
    for n in range(3):
        run = run_event(KafkaTarget(topic="orders", key=None, value=str(n)))
        for _ in range(2):
            record = _record(run, run_id=uuid.uuid4())
            planned, skipped = planner.plan(record)
            assert skipped is None and planned.emission is not None
            assert planned.emission.value == str(n).encode()
