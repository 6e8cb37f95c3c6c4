"""The web dashboard in real headless Chromium, on a running system.

All four services run as processes (``pipeline``) with the API process beside them, on the
test stack's PostgreSQL and broker. Jobs like the demo's: one every 2 s that succeeds, one that
fails until it is dead, 120 jobs at midnight UTC (the spike the forecast must show), a Berlin
job with DST ahead, and another tenant's job that must stay invisible. The browser signs in
with a tenant token, sees the forecast's midnight spike and the dead run, clicks Retry, and
sees the pipeline make a new attempt. Screenshots go to tests/artifacts/dashboard/.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from duetime.lifetime import parent_death_preexec
from duetime.store.tokens import tokens_create
from duetime_infra.ports import find_free_port
from tests.fixtures.browser import ARTIFACTS, chromium_executable
from tests.fixtures.polling import wait_for
from tests.fixtures.target import RecordingTarget, http_target  # noqa: F401  (fixture)

from .pipeline import Pipeline, e2e_job, pipeline  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

MIDNIGHT_JOBS = 120


def _spike_hour(now: datetime) -> int:
    """Midnight UTC, unless the test runs so close to it that the planner would already be
    planning the spike (or it would fall just past the forecast's end): noon then."""
    minute_of_day = now.hour * 60 + now.minute
    near_midnight = minute_of_day >= 23 * 60 + 50 or minute_of_day < 5
    return 12 if near_midnight else 0


def _next_spike(now: datetime) -> datetime:
    spike = now.replace(hour=_spike_hour(now), minute=0, second=0, microsecond=0)
    return spike if spike > now else spike + timedelta(days=1)


@pytest.fixture
def browser() -> Iterator[Browser]:
    executable = chromium_executable()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def _start_api(system: Pipeline, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = find_free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "duetime.cli.main", "service", "api", "--port", str(port)],
            env={**system.env, "DUETIME_LOG_LEVEL": "DEBUG"},
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=parent_death_preexec(signal.SIGTERM),
        )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, log_path.read_text(errors="replace")
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    # Generous: its imports alone take seconds on a busy two-core machine.
    wait_for("the API to listen", healthy, timeout=90)
    return process, base


def _jobs(target_url: str, spike_hour: int) -> list[dict[str, Any]]:
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    ok = {"http": {"url": f"{target_url}/ok", "timeout_seconds": 10}}
    return [
        e2e_job("acme.every-2s", f"{target_url}/ok/every-2s", tenant="acme"),
        e2e_job(
            "acme.always-fails",
            f"{target_url}/fail/always",
            tenant="acme",
            schedule={"at": soon},
            retry={"max_attempts": 2, "initial_interval_seconds": 0.2, "jitter": 0},
        ),
        *(
            {
                "id": f"acme.nightly-{n:03d}",
                "tenant": "acme",
                "schedule": {"cron": f"0 {spike_hour} * * *"},
                "target": ok,
                "target_service": "acme-billing",
            }
            for n in range(MIDNIGHT_JOBS)
        ),
        {
            "id": "acme.berlin-0230",
            "tenant": "acme",
            "schedule": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
            "target": ok,
        },
        {
            "id": "globex.secret-payroll",
            "tenant": "globex",
            "schedule": {"cron": "0 0 * * *"},
            "target": ok,
        },
    ]


def _dead_run(system: Pipeline) -> Any:
    def dead() -> Any:
        rows = system.sql(
            "SELECT run_id, attempt FROM runs WHERE job_id = 'acme.always-fails' AND state = 'dead'"
        )
        return rows[0] if rows else None

    return system.wait_until("the failing job's run to be dead", dead, timeout=60)


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.joinpath("dashboard").mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard" / f"{name}.png"), full_page=True)


def test_dashboard_shows_forecast_and_dead_run_and_retries_it(
    pipeline: Pipeline,  # noqa: F811
    http_target: RecordingTarget,  # noqa: F811
    browser: Browser,
    tmp_path: Path,
) -> None:
    spike = _next_spike(datetime.now(UTC))
    pipeline.apply(_jobs(http_target.url, spike.hour))
    with pipeline.store.tx() as tx:
        acme_token = tokens_create(tx.conn, tenant="acme", name="browser")[0].token
    api, base = _start_api(pipeline, tmp_path / "api.log")
    try:
        dead = _dead_run(pipeline)
        assert dead.attempt == 2
        pipeline.wait_until(
            "a succeeded run",
            lambda: pipeline.sql("SELECT 1 FROM runs WHERE state = 'succeeded' LIMIT 1"),
            timeout=30,
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()

        # Signed out, every page leads to the sign-in form; a wrong token is refused.
        page.goto(f"{base}/ui/jobs")
        expect(page).to_have_url(f"{base}/ui/login")
        page.fill("#token", "dt_000000000000_" + "A" * 43)
        page.click("button[type=submit]")
        expect(page.locator("p.error")).to_contain_text("not valid")
        page.fill("#token", acme_token)
        page.click("button[type=submit]")
        expect(page).to_have_url(f"{base}/ui/")
        expect(page.locator("nav .scope")).to_contain_text("tenant acme")

        # The token is in an HttpOnly, SameSite=Strict cookie scripts cannot read.
        [cookie] = context.cookies()
        assert cookie["name"] == "duetime_token" and cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        assert page.evaluate("document.cookie") == ""

        # The forecast: the midnight spike is the peak (the 120 jobs, plus the 2 s job's 30
        # runs of that minute), drawn and labelled.
        chart = page.locator("svg.forecast")
        expect(chart).to_be_visible()
        assert chart.get_attribute("data-peak-minute") == spike.isoformat()
        assert float(chart.get_attribute("data-peak-runs") or 0) == MIDNIGHT_JOBS + 30
        expect(chart.locator(".peak-label")).to_have_text(
            f"peak {MIDNIGHT_JOBS + 30} runs at {spike:%H}:00 UTC"
        )
        expect(page.locator("#lateness")).to_contain_text("p99")
        expect(page.locator("#health .stat.dead .value")).to_have_text("1")

        # The dead run is listed with a Retry button; globex's job is nowhere.
        dead_rows = page.locator("#dead table.runs tbody tr")
        expect(dead_rows).to_have_count(1)
        expect(dead_rows).to_contain_text("acme.always-fails")
        expect(dead_rows).to_contain_text("2 of 2")
        assert "globex" not in page.content()
        _shot(page, "overview")

        dead_rows.locator("button.retry").click()
        run_path = f"/ui/runs/{dead.run_id}"
        expect(page).to_have_url(f"{base}{run_path}?retried=1")
        expect(page.locator("p.notice")).to_contain_text("attempt 3 of 3 is scheduled")

        # The pipeline makes the new attempt: it fails like the others, so the run is dead
        # again with a third attempt listed.
        def third_attempt_failed() -> bool:
            page.goto(f"{base}{run_path}")
            rows = page.locator("table.attempts tbody tr")
            return rows.count() == 3 and "failed" in rows.nth(2).inner_text()

        wait_for("the retried run's third attempt", third_attempt_failed, timeout=60)
        third = page.locator("table.attempts tbody tr").nth(2).locator("td")
        expect(third.nth(0)).to_have_text("3")
        expect(third.nth(3)).to_have_text("500")
        expect(page.locator("table.facts .state")).to_have_text("dead")
        _shot(page, "run")

        # Jobs table with search; the job page with its next occurrences, DST changes and runs.
        page.goto(f"{base}/ui/jobs")
        expect(page.locator("table.jobs tbody tr")).to_have_count(50)  # a page
        expect(page.locator("a.next")).to_be_visible()
        page.fill("#q", "berlin")
        page.click("form.search button")
        rows = page.locator("table.jobs tbody tr")
        expect(rows).to_have_count(1)
        expect(rows).to_contain_text("Europe/Berlin")
        _shot(page, "jobs")
        rows.locator("a").first.click()
        expect(page.locator("h1")).to_have_text("Job acme.berlin-0230")
        expect(page.locator("table.occurrences tbody tr")).to_have_count(10)
        expect(page.locator("table.occurrences")).to_contain_text(re.compile(r"02:30:00 CES?T"))
        expect(page.locator("table.dst")).to_contain_text("shifted")
        _shot(page, "job")
        page.goto(f"{base}/ui/jobs/acme.always-fails")
        history = page.locator("#history table.runs tbody tr")
        expect(history).to_have_count(1)
        expect(history.locator("li.attempt")).to_have_count(3)

        # Another tenant's job and run are not found, exactly like ones that do not exist.
        other = page.goto(f"{base}/ui/jobs/globex.secret-payroll")
        assert other is not None and other.status == 404
        missing = page.goto(f"{base}/ui/jobs/no-such-job")
        assert missing is not None and missing.status == 404

        # A retry posted without the page's CSRF token, or from another origin, is refused.
        forged = page.request.post(f"{base}{run_path}/retry", form={"csrf": "0" * 64})
        assert forged.status == 403
        csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
        elsewhere = page.request.post(
            f"{base}{run_path}/retry", form={"csrf": csrf}, headers={"Origin": "http://evil.test"}
        )
        assert elsewhere.status == 403
        # With the page's token the form goes through: this run is dead again, retried again.
        again = page.request.post(f"{base}{run_path}/retry", form={"csrf": csrf})
        assert again.ok and again.url.endswith(f"{run_path}?retried=1")
        # Signing out forgets the cookie.
        page.goto(f"{base}/ui/")
        page.click("nav button")
        expect(page).to_have_url(f"{base}/ui/login")
        assert context.cookies() == []
        context.close()
    finally:
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=20)
    log = (tmp_path / "api.log").read_text(errors="replace")
    assert '"POST /ui/login HTTP/1.1" 303' in log
    assert acme_token not in log and acme_token.split("_", 2)[2] not in log
