"""The REST API on a real PostgreSQL: tokens, jobs CRUD, runs, stats, and tenant isolation."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer

from duetime.bus.kafka import create_topics, producer_config
from duetime.config import Settings
from duetime.errors import InvalidInput
from duetime.jobdef import parse_job
from duetime.store import flow, tenants
from duetime.store.tokens import tokens_revoke

from .api_client import Api, dead_run, http_job, open_api

pytestmark = pytest.mark.integration


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with open_api(database_url) as handle:
        yield handle


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_every_v1_endpoint_needs_a_valid_token(api: Api) -> None:
    admin = api.token(None)
    assert api.client.get("/healthz").status_code == 200
    good = api.client.get("/v1/whoami", headers=admin)
    assert good.status_code == 200 and good.json()["admin"] is True
    token = admin["Authorization"].removeprefix("Bearer ")
    token_id = token.split("_")[1]
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    for headers in (
        {},
        {"Authorization": "Bearer "},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": f"Bearer {forged}"},  # right id, wrong secret
        {"Authorization": "Bearer dt_000000000000_" + "A" * 43},  # unknown id
    ):
        answer = api.client.get("/v1/jobs", headers=headers)
        assert answer.status_code == 401, headers
        assert answer.json()["error"] == "unauthenticated"
        assert answer.headers["www-authenticate"] == "Bearer"
    with api.store.tx() as tx:
        assert tokens_revoke(tx.conn, token_id)
    assert api.client.get("/v1/jobs", headers=admin).status_code == 401


def test_job_lifecycle(api: Api) -> None:
    acme = api.token("acme")
    created = api.client.post("/v1/jobs", json=http_job("nightly"), headers=acme)
    assert created.status_code == 201, created.text
    job = created.json()
    # The tenant comes from the token; the definition is in the job-file format.
    assert job["tenant"] == "acme" and job["version"] == 1 and job["paused"] is False
    assert job["definition"]["schedule"]["cron"] == "0 2 * * *"
    assert job["next_run_at"] is not None
    assert api.client.get("/v1/jobs/nightly", headers=acme).json() == job

    again = api.client.post("/v1/jobs", json=http_job("nightly"), headers=acme)
    assert again.status_code == 409 and again.json()["field"] == "job.id"

    # Replace: what GET returned goes back with a change; its version is checked.
    definition = {**job["definition"], "schedule": {"cron": "30 3 * * *"}}
    replaced = api.client.put("/v1/jobs/nightly", json=definition, headers=acme)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["version"] == 2
    assert replaced.json()["definition"]["schedule"]["cron"] == "30 3 * * *"
    stale = api.client.put("/v1/jobs/nightly", json=definition, headers=acme)  # version 1
    assert stale.status_code == 409 and stale.json()["field"] == "job.version"
    other_id = api.client.put("/v1/jobs/nightly", json=http_job("other"), headers=acme)
    assert other_id.status_code == 400 and other_id.json()["field"] == "job.id"
    missing = api.client.put("/v1/jobs/ghost", json=http_job("ghost"), headers=acme)
    assert missing.status_code == 404
    # An admin's replacement without a tenant keeps the job in its tenant; one with moves it.
    admin = api.token(None)
    kept = api.client.put("/v1/jobs/nightly", json=http_job("nightly"), headers=admin)
    assert kept.status_code == 200 and kept.json()["tenant"] == "acme"
    moved = api.client.put(
        "/v1/jobs/nightly", json=http_job("nightly", tenant="globex"), headers=admin
    )
    assert moved.json()["tenant"] == "globex"
    assert api.client.get("/v1/jobs/nightly", headers=acme).status_code == 404
    back = http_job("nightly", tenant="acme")
    assert api.client.put("/v1/jobs/nightly", json=back, headers=admin).status_code == 200

    paused = api.client.post("/v1/jobs/nightly/pause", headers=acme)
    assert paused.json() == {"id": "nightly", "outcome": "paused"}
    assert api.client.get("/v1/jobs/nightly", headers=acme).json()["paused"] is True
    listed = api.client.get("/v1/jobs", params={"state": "paused"}, headers=acme).json()
    assert [j["id"] for j in listed["items"]] == ["nightly"]
    assert (
        api.client.get("/v1/jobs", params={"state": "active"}, headers=acme).json()["items"] == []
    )
    resumed = api.client.post("/v1/jobs/nightly/resume", headers=acme)
    assert resumed.json() == {"id": "nightly", "outcome": "resumed"}

    assert api.client.delete("/v1/jobs/nightly", headers=acme).status_code == 204
    assert api.client.get("/v1/jobs/nightly", headers=acme).status_code == 404
    assert api.client.delete("/v1/jobs/nightly", headers=acme).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (http_job("bad-cron", schedule={"cron": "60 * * * *"}), "job.schedule.cron"),
        (http_job("bad-zone", schedule={"cron": "0 2 * * *", "time_zone": "Mars/Base"}), None),
        (http_job("bad-url", target={"http": {"url": "ftp://example.com"}}), None),
        (http_job("bad id!"), "job.id"),
        (http_job("extra", colour="blue"), "job.colour"),
        (
            http_job(
                "secret",
                target={"http": {"url": "https://x.example", "headers": {"Authorization": "x"}}},
            ),
            "job.target.http.headers.Authorization",
        ),
        ([1, 2], "job"),
        ("a string", "job"),
    ],
)
def test_bad_jobs_get_the_job_file_message(api: Api, body: Any, field: str | None) -> None:
    """The API refuses what `duetime jobs apply` refuses, with the same field and message."""
    answer = api.client.post("/v1/jobs", json=body, headers=api.token(None))
    assert answer.status_code == 400, answer.text
    # A job file holding this one object is refused by the same parse, field and message.
    with pytest.raises(InvalidInput) as refused:
        parse_job(body, "job")
    assert answer.json()["message"] == str(refused.value)
    assert answer.json()["field"] == refused.value.field
    if field is not None:
        assert answer.json()["field"] == field


def test_malformed_json_and_parameters_are_400_naming_the_field(api: Api) -> None:
    admin = api.token(None)
    broken = api.client.post(
        "/v1/jobs", content=b"{not json", headers={**admin, "Content-Type": "application/json"}
    )
    assert broken.status_code == 400
    cases = [
        ("/v1/jobs", {"limit": "0"}, "limit"),
        ("/v1/jobs", {"cursor": "!!!"}, "cursor"),
        ("/v1/jobs", {"tenant": "Not A Tenant"}, "tenant"),
        ("/v1/jobs", {"q": "a\x00b"}, "q"),
        ("/v1/runs", {"state": "exploded"}, "state"),
        ("/v1/runs", {"since": "yesterday"}, "since"),
        ("/v1/runs", {"since": "2026-01-01T00:00:00"}, "since"),  # no offset
        ("/v1/runs/not-a-uuid", {}, "run_id"),
        ("/v1/stats/forecast", {"hours": "100"}, "hours"),
    ]
    for path, params, field in cases:
        answer = api.client.get(path, params=params, headers=admin)
        assert answer.status_code == 400, (path, params, answer.text)
        assert answer.json()["field"] == field, (path, params, answer.json())


@pytest.mark.parametrize(
    ("target", "field", "reason"),
    [
        ({"http": {"url": "https://e.com", "body": "a\x00b"}}, "job.target.http.body", "NUL"),
        ({"kafka": {"topic": "t", "value": "a\x00"}}, "job.target.kafka.value", "NUL"),
        ({"http": {"url": "https://e.com", "body": "a\ud800"}}, "job.target.http.body", "Unicode"),
        ({"http": {"url": "https://e.com/\ud800"}}, "job.target.http.url", "Unicode"),
        (
            {"http": {"url": "https://e.com", "headers": {"X-A": "\udfff"}}},
            "job.target.http.headers.X-A",
            "Unicode",
        ),
    ],
)
def test_strings_postgresql_cannot_store_are_refused_with_their_field(
    api: Api, target: dict[str, Any], field: str, reason: str
) -> None:
    """NUL and lone surrogates (JSON can carry them) would fail in the driver: a 400 instead,
    with the message a job file gets."""
    headers = {**api.token(None), "Content-Type": "application/json"}
    body = json.dumps(http_job("odd", target=target))  # ASCII escapes: \u0000, \ud800
    answer = api.client.post("/v1/jobs", content=body, headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field and reason in answer.json()["message"]
    if reason == "Unicode":  # the job file's message; a NUL there is PostgreSQL's to refuse
        with pytest.raises(InvalidInput) as refused:
            parse_job(http_job("odd", target=target), "job")
        assert answer.json()["message"] == str(refused.value)
    # A key the answer would have to quote is refused before: answers are valid UTF-8.
    odd_key = json.dumps(http_job("odd", **{"\ud800": 1}))
    answer = api.client.post("/v1/jobs", content=odd_key, headers=headers)
    assert answer.status_code == 400 and answer.json()["field"] == "job"
    deep = api.client.post("/v1/jobs", content="[" * 100_000 + "]" * 100_000, headers=headers)
    assert deep.status_code == 400 and deep.json()["field"] == "body"


def test_a_tenants_job_quota_holds_for_api_writes(api: Api) -> None:
    acme = api.token("acme")
    with api.store.tx() as tx:
        tenants.set_tenant(tx.conn, "acme", max_jobs=1)
    assert api.client.post("/v1/jobs", json=http_job("first"), headers=acme).status_code == 201
    over = api.client.post("/v1/jobs", json=http_job("second"), headers=acme)
    assert over.status_code == 409 and over.json()["field"] == "job.tenant"
    assert "at most 1 jobs" in over.json()["message"]
    assert api.client.get("/v1/jobs/second", headers=acme).status_code == 404
    # Changing a job that stays in the tenant is never refused.
    changed = http_job("first", schedule={"cron": "5 4 * * *"})
    assert api.client.put("/v1/jobs/first", json=changed, headers=acme).status_code == 200


def test_pages_follow_the_cursor(api: Api) -> None:
    acme = api.token("acme")
    ids = [f"job-{n:02d}" for n in range(7)]
    for job_id in reversed(ids):
        assert api.client.post("/v1/jobs", json=http_job(job_id), headers=acme).status_code == 201
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = api.client.get("/v1/jobs", params=params, headers=acme).json()
        seen += [j["id"] for j in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids and pages == 3
    found = api.client.get("/v1/jobs", params={"q": "JOB-0_"}, headers=acme).json()
    assert found["items"] == []  # '_' is a character, not a LIKE wildcard
    found = api.client.get("/v1/jobs", params={"q": "B-03"}, headers=acme).json()
    assert [j["id"] for j in found["items"]] == ["job-03"]


def test_runs_detail_and_retry_of_adead_run(api: Api) -> None:
    acme = api.token("acme")
    body = http_job("flaky", retry={"max_attempts": 1})
    assert api.client.post("/v1/jobs", json=body, headers=acme).status_code == 201
    first_release = datetime.now(UTC) + timedelta(seconds=2)
    run_id = dead_run(api, "flaky", acme, released_at=first_release, throttled_ms=1500)

    listed = api.client.get("/v1/runs", params={"job_id": "flaky"}, headers=acme).json()
    assert [r["run_id"] for r in listed["items"]] == [str(run_id)]
    assert listed["items"][0]["state"] == "dead"
    dead = api.client.get("/v1/runs", params={"state": "dead"}, headers=acme).json()
    assert len(dead["items"]) == 1
    assert (
        api.client.get("/v1/runs", params={"state": "succeeded"}, headers=acme).json()["items"]
        == []
    )
    future = _iso(datetime.now(UTC) + timedelta(hours=1))
    later = api.client.get("/v1/runs", params={"since": future}, headers=acme).json()
    assert later["items"] == []

    detail = api.client.get(f"/v1/runs/{run_id}", headers=acme).json()
    assert detail["state"] == "dead" and detail["attempt"] == 1
    [attempt] = detail["attempts"]
    assert attempt["worker"] == "worker-a" and attempt["status"] == "failed"
    assert attempt["status_code"] == 500 and attempt["error"] == "HTTP 500"
    assert attempt["duration_ms"] is not None and attempt["finished_at"] is not None
    assert "lateness_ms" in detail and "throttled_ms" in detail
    assert datetime.fromisoformat(attempt["released_at"]) == first_release
    assert attempt["throttled_ms"] == 1500 and attempt["due_at"] == detail["due_at"]
    first_lateness = attempt["lateness_ms"]
    assert first_lateness == detail["lateness_ms"] and first_lateness > 1000

    retried = api.client.post(f"/v1/runs/{run_id}/retry", headers=acme)
    assert retried.status_code == 200, retried.text
    assert retried.json()["state"] == "scheduled"
    assert retried.json()["max_attempts"] == 2 and retried.json()["attempt"] == 1
    # The second attempt can now be claimed, as the outbox would hand it to a worker.
    scheduled_for = datetime.fromisoformat(retried.json()["scheduled_for"])
    assert api.store.runs_claim(
        run_id, scheduled_for, 2, "worker-b", timedelta(seconds=30), throttled_ms=0
    )
    # Each attempt keeps its own release figures: the retry's do not overwrite the first's.
    first, second = api.client.get(f"/v1/runs/{run_id}", headers=acme).json()["attempts"]
    assert datetime.fromisoformat(first["released_at"]) == first_release
    assert (first["throttled_ms"], first["lateness_ms"]) == (1500, first_lateness)
    assert second["worker"] == "worker-b" and second["status"] is None
    assert second["released_at"] is None and second["throttled_ms"] == 0
    assert second["due_at"] == retried.json()["due_at"] != first["due_at"]
    assert second["lateness_ms"] is not None and second["lateness_ms"] < first_lateness
    again = api.client.post(f"/v1/runs/{run_id}/retry", headers=acme)
    assert again.status_code == 409 and again.json()["field"] == "state"
    unknown = api.client.post(f"/v1/runs/{uuid.uuid4()}/retry", headers=acme)
    assert unknown.status_code == 404


def test_tenants_see_only_their_own(api: Api) -> None:
    acme, globex, admin = api.token("acme"), api.token("globex"), api.token(None)
    body = http_job("acme-billing", retry={"max_attempts": 1})
    assert api.client.post("/v1/jobs", json=body, headers=acme).status_code == 201
    report = api.client.post("/v1/jobs", json=http_job("globex-report"), headers=globex)
    assert report.status_code == 201
    run_id = dead_run(api, "acme-billing", acme)

    # Another tenant's job and run are not found, whatever is asked of them: never a 403.
    for method, path in (
        ("GET", "/v1/jobs/acme-billing"),
        ("DELETE", "/v1/jobs/acme-billing"),
        ("POST", "/v1/jobs/acme-billing/pause"),
        ("POST", "/v1/jobs/acme-billing/resume"),
        ("POST", "/v1/jobs/acme-billing/trigger"),
        ("GET", f"/v1/runs/{run_id}"),
        ("POST", f"/v1/runs/{run_id}/retry"),
    ):
        answer = api.client.request(method, path, headers=globex)
        assert answer.status_code == 404, (method, path, answer.text)
        # Exactly the answer for a job or run that does not exist, but for the name.
        absent = path.replace("acme-billing", "no-such-job").replace(str(run_id), str(uuid.uuid4()))
        nothing = api.client.request(method, absent, headers=globex)
        assert nothing.status_code == 404
        assert {**answer.json(), "message": ""} == {**nothing.json(), "message": ""}
    replace = api.client.put("/v1/jobs/acme-billing", json=http_job("acme-billing"), headers=globex)
    assert replace.status_code == 404
    backfill = api.client.post(
        "/v1/jobs/acme-billing/backfill",
        json={"since": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z"},
        headers=globex,
    )
    assert backfill.status_code == 404
    # Taking another tenant's job id is refused without moving or changing that job.
    taken = api.client.post("/v1/jobs", json=http_job("acme-billing"), headers=globex)
    assert taken.status_code == 409
    # A tenant cannot write a job into another tenant.
    foreign = api.client.post("/v1/jobs", json=http_job("sneaky", tenant="acme"), headers=globex)
    assert foreign.status_code == 400 and foreign.json()["field"] == "job.tenant"

    def ids(path: str, headers: dict[str, str], **params: str) -> list[str]:
        items = api.client.get(path, params=params, headers=headers).json()["items"]
        return sorted(i.get("id") or i["job_id"] for i in items)

    assert ids("/v1/jobs", globex) == ["globex-report"]
    assert ids("/v1/jobs", globex, tenant="acme") == []
    assert ids("/v1/runs", globex) == []
    assert ids("/v1/jobs", admin) == ["acme-billing", "globex-report"]
    assert ids("/v1/jobs", admin, tenant="acme") == ["acme-billing"]
    assert ids("/v1/runs", admin) == ["acme-billing"]
    job = api.client.get("/v1/jobs/acme-billing", headers=acme).json()
    assert job["tenant"] == "acme" and job["version"] == 1
    stats = api.client.get("/v1/stats/lateness", headers=globex).json()
    assert stats["runs"] == 0
    assert api.client.get("/v1/stats/lateness", headers=acme).json()["runs"] == 1
    # Operator endpoints need the admin token.
    assert api.client.get("/v1/stats/consumer-lag", headers=acme).status_code == 403
    assert api.client.get("/v1/stats/shards", headers=acme).status_code == 403


def test_operator_stats_shard_owners_and_consumer_lag(api: Api) -> None:
    admin = api.token(None)
    assert api.client.get("/v1/stats/shards", headers=admin).json() == []  # SKIP LOCKED mode
    with api.store.tx() as tx:
        assert tx.shards_claim("planner-a", {3: 41, 7: 42}) == {3, 7}
    shards = api.client.get("/v1/stats/shards", headers=admin).json()
    assert [(s["shard"], s["owner"], s["token"], s["rejected"]) for s in shards] == [
        (3, "planner-a", 41, 0),
        (7, "planner-a", 42, 0),
    ]
    # No broker configured for this app: every pair is listed, each with the reason.
    lag = api.client.get("/v1/stats/consumer-lag", headers=admin).json()
    pairs = {(entry["group"], entry["topic"]) for entry in lag}
    assert ("api-test.workers", "api-test.runs.ready") in pairs
    assert ("api-test.reaper", "api-test.runs.heartbeats") in pairs
    assert len(pairs) == 7 and all(entry["lag"] is None and entry["error"] for entry in lag)


def test_trigger_and_backfill_create_runs_once(api: Api) -> None:
    admin = api.token(None)
    body = http_job("hourly", schedule={"interval": "PT1H"}, tenant="acme")
    assert api.client.post("/v1/jobs", json=body, headers=admin).status_code == 201
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    span = {"since": _iso(now - timedelta(hours=5)), "until": _iso(now - timedelta(minutes=1))}
    first = api.client.post("/v1/jobs/hourly/backfill", json=span, headers=admin)
    assert first.status_code == 201, first.text
    assert first.json()["occurrences"] == 5 and first.json()["created"] == 5
    second = api.client.post("/v1/jobs/hourly/backfill", json=span, headers=admin).json()
    assert second["occurrences"] == 5 and second["created"] == 0
    assert second["run_ids"] == first.json()["run_ids"]
    runs = api.client.get("/v1/runs", params={"job_id": "hourly"}, headers=admin).json()
    assert len(runs["items"]) == 5
    assert {r["state"] for r in runs["items"]} == {"scheduled"}
    for bad, field in (
        ({"since": span["until"], "until": span["since"]}, "until"),
        ({"since": span["since"], "until": _iso(now + timedelta(hours=2))}, "until"),
        ({"since": "2025-01-01T00:00:00Z", "until": "2025-06-01T00:00:00Z"}, "until"),
        ({"since": "0001-01-01T00:00:00Z", "until": "0001-01-02T00:00:00Z"}, "since"),
        ({"since": span["since"], "until": "0001-01-01T00:00:00+00:01"}, "until"),  # not in UTC
        ({"since": "2026-01-01T00:00:00", "until": span["until"]}, "since"),
        ({"until": span["until"]}, "since"),
    ):
        answer = api.client.post("/v1/jobs/hourly/backfill", json=bad, headers=admin)
        assert answer.status_code == 400, (bad, answer.text)
        assert answer.json()["field"] == field, (bad, answer.json())
    trigger = api.client.post("/v1/jobs/hourly/trigger", headers=admin)
    assert trigger.status_code == 201
    detail = api.client.get(f"/v1/runs/{trigger.json()['run_id']}", headers=admin).json()
    assert detail["state"] == "scheduled" and detail["job_id"] == "hourly"


def test_forecast_counts_runs_per_minute_and_warns_of_pile_ups(api: Api) -> None:
    acme, globex, admin = api.token("acme"), api.token("globex"), api.token(None)
    # The pile-up falls twelve hours from now, whatever the time of day, so the forecast's 24 h
    # horizon holds the whole ten-minute window (at 00:02 a midnight window would be cut at 00:02).
    peak_at = (datetime.now(UTC) + timedelta(hours=12)).replace(minute=0, second=0, microsecond=0)
    daily = {"cron": f"0 {peak_at.hour} * * *"}
    with api.store.tx() as tx:
        flow.set_limits(tx.conn, "slow.example.com", rate=0.02)  # 1.2 runs a minute
    for n in range(3):
        body = http_job(
            f"midnight-{n}",
            schedule=daily,
            target={"http": {"url": "https://slow.example.com/run"}},
        )
        assert api.client.post("/v1/jobs", json=body, headers=acme).status_code == 201
    other = http_job("g-midnight", schedule=daily, target={"http": {"url": "https://g.example"}})
    assert api.client.post("/v1/jobs", json=other, headers=globex).status_code == 201
    windowed = http_job(
        "spread",
        schedule=daily,
        window_seconds=600,
        target={"http": {"url": "https://slow.example.com/run"}},
    )
    assert api.client.post("/v1/jobs", json=windowed, headers=acme).status_code == 201

    forecast = api.client.get("/v1/stats/forecast", headers=acme).json()
    peak = _iso(peak_at)
    [series] = forecast["series"]  # acme's only: globex's job is not shown to it
    assert (series["target_service"], series["tenant"]) == ("slow.example.com", "acme")
    start = datetime.fromisoformat(forecast["start"])
    points = {_iso(start + timedelta(minutes=m)): runs for m, runs in series["points"]}
    assert series["runs"] == pytest.approx(4)
    # Three runs at the peak minute plus a tenth of the windowed one, spread over ten minutes.
    assert points[peak] == pytest.approx(3.1)
    assert len(points) == 10 and sum(points.values()) == pytest.approx(4)
    [pile_up] = forecast["pile_ups"]
    assert pile_up["target_service"] == "slow.example.com"
    assert pile_up["minute"].replace("+00:00", "Z") == peak
    assert pile_up["limit_per_minute"] == pytest.approx(1.2)
    everyone = api.client.get("/v1/stats/forecast", headers=admin).json()
    assert {(s["target_service"], s["tenant"]) for s in everyone["series"]} == {
        ("slow.example.com", "acme"),
        ("g.example", "globex"),
    }
    outbox = api.client.get("/v1/stats/outbox", headers=acme).json()
    assert outbox == {"runs": 0, "oldest_due_at": None, "oldest_age_seconds": None}
    assert api.client.post("/v1/jobs/midnight-0/trigger", headers=acme).status_code == 201
    assert api.client.get("/v1/stats/outbox", headers=acme).json()["runs"] == 1
    assert api.client.get("/v1/stats/outbox", headers=globex).json()["runs"] == 0


def test_consumer_lag_per_group_and_topic_on_a_real_broker(database_url: str, stack: Any) -> None:
    prefix = f"lag{uuid.uuid4().hex[:8]}."
    settings = Settings(database_url, stack.kafka_bootstrap, topic_prefix=prefix)
    create_topics(settings)
    producer = Producer(producer_config(settings))
    for n in range(3):  # one at a time: the test broker counts a batch as one offset
        producer.produce(f"{prefix}runs.ready", b"x", f"k{n}".encode(), partition=n)
        assert producer.flush(10) == 0
    with open_api(database_url, stack.kafka_bootstrap, prefix) as api:
        lag = api.client.get("/v1/stats/consumer-lag", headers=api.token(None)).json()
    by_pair = {(entry["group"], entry["topic"]): entry for entry in lag}
    ready = by_pair[(f"{prefix}workers", f"{prefix}runs.ready")]
    assert ready["lag"] == 3 and sum(ready["partitions"].values()) == 3 and ready["error"] is None
    assert by_pair[(f"{prefix}reaper", f"{prefix}runs.results")]["lag"] == 0


def test_openapi_document_lists_the_v1_paths(api: Api) -> None:
    document = api.client.get("/openapi.json").json()
    paths = set(document["paths"])
    assert {
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/pause",
        "/v1/jobs/{job_id}/resume",
        "/v1/jobs/{job_id}/trigger",
        "/v1/jobs/{job_id}/backfill",
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/retry",
        "/v1/stats/lateness",
        "/v1/stats/outbox",
        "/v1/stats/consumer-lag",
        "/v1/stats/forecast",
    } <= paths
    assert json.dumps(document["components"]["securitySchemes"]).count("bearer") == 1
    # No page that would load scripts from a CDN.
    assert api.client.get("/docs").status_code == 404
    assert api.client.get("/redoc").status_code == 404
