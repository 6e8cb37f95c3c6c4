"""The dashboard's pages as HTML, from rows the routes read (``routes``). No I/O here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from duetime.forecast import ForecastResult
from duetime.schedule import DstEffect, Occurrence
from duetime.store.dashboard import QueueDepth
from duetime.store.tokens import Principal

from ..runs import lateness_ms
from .chart import forecast_svg, minute_totals
from .layout import (
    duration_text,
    e,
    job_link,
    page,
    retry_form,
    run_link,
    state_badge,
    table,
    time_text,
)

__all__ = [
    "Overview",
    "job_page",
    "jobs_page",
    "login_page",
    "message_page",
    "overview_page",
    "run_page",
]


def login_page(error: str | None = None) -> str:
    notice = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    body = (
        f"{notice}<p>Sign in with an API token: <code>duetime tokens create --tenant T</code> "
        "prints one, and <code>duetime up</code> writes the admin token to "
        "<code>&lt;data dir&gt;/api.json</code> (and prints a one-time sign-in link).</p>"
        '<form class="login" method="post" action="/ui/login">'
        '<label for="token">Token</label>'
        '<input id="token" name="token" type="password" autocomplete="off" required '
        'placeholder="dt_…">'
        '<button type="submit">Sign in</button></form>'
    )
    return page("Sign in", body)


def message_page(title: str, message: str, caller: Principal | None, csrf: str = "") -> str:
    return page(title, f'<p class="error">{e(message)}</p>', caller, csrf)


def _seconds(value: float | None) -> str:
    return duration_text(None if value is None else value * 1000)


def _stat(label: str, value: str, css: str = "") -> str:
    return f'<div class="stat {e(css)}"><div class="value">{value}</div><div>{e(label)}</div></div>'


def _runs_table(
    runs: Sequence[Any],
    csrf: str,
    attempts: Mapping[Any, Sequence[Any]] | None = None,
    with_job: bool = True,
) -> str:
    headers = ["run", "scheduled for", "state", "attempt", "lateness", "last error"]
    if with_job:
        headers.insert(1, "job")
    if attempts is not None:
        headers.append("attempts")
    headers.append("")
    rows = []
    for run in runs:
        cells = [
            run_link(run.run_id),
            time_text(run.scheduled_for),
            state_badge(run.state),
            f"{run.attempt} of {run.max_attempts}",
            duration_text(lateness_ms(run)),
            f'<span class="error-text">{e(run.last_error)}</span>',
        ]
        if with_job:
            cells.insert(1, job_link(run.job_id))
        if attempts is not None:
            cells.append(_attempt_list(attempts.get(run.run_id, ())))
        cells.append(retry_form(run.run_id, csrf) if run.state == "dead" else "")
        rows.append(cells)
    return table(headers, rows, "runs")


def _attempt_list(attempts: Sequence[Any]) -> str:
    if not attempts:
        return '<span class="none">–</span>'
    items = []
    for a in attempts:
        status = a.outcome or "running"
        code = f" HTTP {a.status_code}" if a.status_code is not None else ""
        error = f" {e(a.error)}" if a.error else ""
        items.append(
            f'<li class="attempt" data-attempt="{a.attempt}">#{a.attempt} '
            f"{state_badge(status)}{e(code)} on {e(a.worker)}, "
            f"{duration_text(a.duration_ms)}{error}</li>"
        )
    return f'<ol class="attempts">{"".join(items)}</ol>'


@dataclass(frozen=True)
class Overview:
    forecast: ForecastResult
    lateness: Any
    outbox: Any
    depth: QueueDepth
    dead_recent: int
    dead_runs: Sequence[Any]


def overview_page(view: Overview, caller: Principal, csrf: str) -> str:
    totals = minute_totals(view.forecast)
    lateness = view.lateness
    pile_ups = table(
        ["minute", "target", "runs", "limit per minute"],
        (
            [
                time_text(p.minute),
                e(p.target_service),
                f"{p.runs:,.0f}",
                f"{p.limit_per_minute:,.0f}",
            ]
            for p in view.forecast.pile_ups[:10]
        ),
        "pile-ups",
    )
    body = (
        '<section id="forecast"><h2>Runs due per minute, next 24 hours</h2>'
        f"<p>From {time_text(view.forecast.start)} to {time_text(view.forecast.end)}; "
        f"{sum(totals.runs):,.0f} runs in all. Minutes where a target's rate limit would "
        'hold runs back (pile-ups) are <span class="pile-up-key">red</span>.</p>'
        f"{forecast_svg(totals)}"
        f"<h3>Pile-ups ({len(view.forecast.pile_ups)})</h3>{pile_ups}</section>"
        '<section id="health"><h2>Now</h2><div class="stats">'
        + _stat("runs due and waiting", f"{view.depth.due_waiting:,}", "queue")
        + _stat("running", f"{view.depth.running:,}")
        + _stat("planned ahead", f"{view.depth.planned_ahead:,}")
        + _stat(
            "due, not yet handed to the broker (outbox)",
            f"{int(view.outbox.runs):,}",
        )
        + _stat("dead in the last 24 h", f"{view.dead_recent:,}", "dead")
        + '</div><h3>Lateness, last hour</h3><div class="stats" id="lateness">'
        + _stat("runs started", f"{int(lateness.runs):,}")
        + _stat("p50", _seconds(lateness.p50_seconds))
        + _stat("p90", _seconds(lateness.p90_seconds))
        + _stat("p99", _seconds(lateness.p99_seconds))
        + _stat("max", _seconds(lateness.max_seconds))
        + "</div></section>"
        '<section id="dead"><h2>Dead runs</h2>'
        "<p>Runs that used every attempt. Retry schedules one more attempt, due now.</p>"
        f"{_runs_table(view.dead_runs, csrf)}</section>"
    )
    return page("Overview", body, caller, csrf)


def _schedule_text(definition: Mapping[str, Any]) -> str:
    schedule = definition["schedule"]
    for kind in ("cron", "interval", "at"):
        if kind in schedule:
            return f"{kind} <code>{e(schedule[kind])}</code> in {e(schedule['time_zone'])}"
    return ""


def jobs_page(
    jobs: Sequence[Any],
    definitions: Sequence[Mapping[str, Any]],
    q: str | None,
    next_after: str | None,
    caller: Principal,
    csrf: str,
) -> str:
    rows = [
        [
            job_link(job.job_id),
            e(job.tenant),
            _schedule_text(definition),
            e(job.target_service),
            time_text(job.next_run_at),
            "paused" if job.paused else "active",
        ]
        for job, definition in zip(jobs, definitions, strict=True)
    ]
    more = ""
    if next_after is not None:
        query = urlencode({k: v for k, v in (("q", q), ("after", next_after)) if v})
        more = f'<p><a class="next" href="/ui/jobs?{e(query)}">Next page</a></p>'
    body = (
        '<form class="search" method="get" action="/ui/jobs">'
        '<label for="q">Search ids and targets</label>'
        f'<input id="q" name="q" type="search" value="{e(q)}">'
        '<button type="submit">Search</button></form>'
        + table(["job", "tenant", "schedule", "target", "next run", "state"], rows, "jobs")
        + more
    )
    return page("Jobs", body, caller, csrf)


def _local_text(occurrence: Occurrence) -> str:
    local = occurrence.local
    return e(f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} (UTC{local:%z})")


def job_page(
    job: Any,
    definition: Mapping[str, Any],
    occurrences: Sequence[Occurrence],
    dst_effects: Sequence[DstEffect],
    runs: Sequence[Any],
    attempts: Mapping[Any, Sequence[Any]],
    caller: Principal,
    csrf: str,
) -> str:
    facts = table(
        ["tenant", "schedule", "target", "window", "retry", "state", "version"],
        [
            [
                e(job.tenant),
                _schedule_text(definition),
                e(job.target_service),
                e(f"{definition['window_seconds']:g} s"),
                e(f"{definition['retry']['max_attempts']} attempts"),
                "paused" if job.paused else "active",
                e(job.version),
            ]
        ],
        "facts",
    )
    upcoming = table(
        ["scheduled for (UTC)", "local time", "DST note"],
        (
            [time_text(o.scheduled_for), _local_text(o), f'<span class="note">{e(o.note)}</span>']
            for o in occurrences
        ),
        "occurrences",
    )
    effects = ""
    if dst_effects:
        effects = "<h3>DST changes in the next year</h3>" + table(
            ["day", "effect", "note"],
            ([e(d.day.isoformat()), e(d.kind), e(d.note)] for d in dst_effects),
            "dst",
        )
    body = (
        f'<section id="job">{facts}</section>'
        f'<section id="next"><h2>Next occurrences</h2>{upcoming}{effects}</section>'
        f'<section id="history"><h2>Run history</h2>'
        f"{_runs_table(runs, csrf, attempts, with_job=False)}</section>"
    )
    return page(f"Job {job.job_id}", body, caller, csrf)


def run_page(detail: Any, now: datetime, retried: bool, caller: Principal, csrf: str) -> str:
    run = detail.run
    notice = ""
    if retried:
        notice = (
            '<p class="notice" role="status">Retried: attempt '
            f"{run.attempt + 1} of {run.max_attempts} is scheduled, due now.</p>"
        )
    facts = table(
        ["job", "scheduled for", "due at", "state", "attempt", "worker", "lateness", "throttled"],
        [
            [
                job_link(run.job_id),
                time_text(run.scheduled_for),
                time_text(run.due_at),
                state_badge(run.state),
                f"{run.attempt} of {run.max_attempts}",
                e(run.worker),
                duration_text(lateness_ms(run)),
                duration_text(run.throttled_ms),
            ]
        ],
        "facts",
    )
    attempts = table(
        ["attempt", "worker", "status", "HTTP status", "error", "started", "duration"],
        (
            [
                e(a.attempt),
                e(a.worker),
                state_badge(a.outcome or "running"),
                e(a.status_code),
                f'<span class="error-text">{e(a.error)}</span>',
                time_text(a.started_at),
                duration_text(a.duration_ms),
            ]
            for a in detail.attempts
        ),
        "attempts",
    )
    retry = retry_form(run.run_id, csrf) if run.state == "dead" else ""
    error = f'<p class="error-text">{e(run.last_error)}</p>' if run.last_error else ""
    body = (
        f"{notice}{facts}{error}{retry}<h2>Attempts</h2>{attempts}"
        f'<p class="muted">Shown at {time_text(now)}.</p>'
    )
    return page(f"Run {run.run_id}", body, caller, csrf)
