"""The dashboard's HTML: the page frame and the small pieces every page uses.

Pages are built from strings on the server; every value that comes from the database or the
request goes through ``escape`` (``html.escape`` with quotes), so a job id or an error text
cannot inject markup. No script is served at all: forms do the writing (docs/dashboard.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape as _escape
from urllib.parse import quote

from duetime.store.tokens import Principal

__all__ = [
    "duration_text",
    "e",
    "job_link",
    "page",
    "retry_form",
    "run_link",
    "state_badge",
    "table",
    "time_text",
]

STYLESHEET = "/ui/static/dashboard.css"


def e(value: object) -> str:
    """``value`` as HTML text, quotes included (safe in attributes too); None is empty."""
    return "" if value is None else _escape(str(value), quote=True)


def time_text(moment: datetime | None) -> str:
    """An instant in UTC to the second, as a ``<time>`` element."""
    if moment is None:
        return '<span class="none">–</span>'
    return f'<time datetime="{e(moment.isoformat())}">{moment:%Y-%m-%d %H:%M:%S} UTC</time>'


def duration_text(milliseconds: float | None) -> str:
    if milliseconds is None:
        return '<span class="none">–</span>'
    if abs(milliseconds) < 1000:
        return f"{milliseconds:.0f} ms"
    return f"{milliseconds / 1000:,.1f} s"


def state_badge(state: str | None) -> str:
    return f'<span class="state state-{e(state)}">{e(state)}</span>'


def job_link(job_id: str) -> str:
    return f'<a href="/ui/jobs/{e(quote(job_id, safe=""))}">{e(job_id)}</a>'


def run_link(run_id: object, text: str | None = None) -> str:
    return f'<a class="run" href="/ui/runs/{e(run_id)}">{e(text or str(run_id)[:8])}</a>'


def retry_form(run_id: object, csrf: str) -> str:
    """The retry button of a dead run: a POST form carrying the session's CSRF token."""
    return (
        f'<form class="inline" method="post" action="/ui/runs/{e(run_id)}/retry">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">'
        '<button type="submit" class="retry">Retry</button></form>'
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], css: str = "") -> str:
    """A table of cells that are HTML already (escape values with ``e`` first)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td class="none" colspan="{len(headers)}">none</td></tr>'
    return f'<table class="{e(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def page(title: str, body: str, caller: Principal | None = None, csrf: str = "") -> str:
    """A whole page; with a caller, the navigation, the token's scope and a sign-out button."""
    nav = ""
    if caller is not None:
        scope = "admin: every tenant" if caller.admin else f"tenant {caller.tenant}"
        nav = (
            '<nav><a class="brand" href="/ui/">duetime</a>'
            '<a href="/ui/">Overview</a><a href="/ui/jobs">Jobs</a>'
            f'<span class="scope">{e(scope)} · token {e(caller.token_id)}</span>'
            '<form class="inline" method="post" action="/ui/logout">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            '<button type="submit">Sign out</button></form></nav>'
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · duetime</title>"
        f'<link rel="stylesheet" href="{STYLESHEET}"></head>'
        f"<body>{nav}<main><h1>{e(title)}</h1>{body}</main></body></html>"
    )
