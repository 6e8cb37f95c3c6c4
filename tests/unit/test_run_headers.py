"""The routing headers on run records: round trip, malformed input, never-early due instants."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from duetime.bus.run_headers import (
    RoutingHeaders,
    epoch_ms,
    epoch_ms_ceil,
    from_epoch_ms,
    read_routing,
    routing_headers,
)

RUN_ID = uuid.UUID("6a1f3c2e-0b7d-4e59-9d41-1c2b3a4d5e6f")


def _as_read(headers: list[tuple[str, str | bytes | None]]) -> list[tuple[str, bytes | None]]:
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in headers]


def test_round_trip() -> None:
    due = datetime(2026, 12, 31, 23, 59, 59, 250_000, tzinfo=UTC)
    sent = datetime(2026, 12, 31, 23, 59, 0, tzinfo=UTC)
    headers = routing_headers(RUN_ID, 2, due, "kafka", sent, target_service="kafka:ü", tenant="t1")
    routing = read_routing(_as_read(headers))
    assert routing is not None
    assert (routing.run_id, routing.attempt, routing.target_kind) == (RUN_ID, 2, "kafka")
    assert (routing.target_service, routing.tenant) == ("kafka:ü", "t1")
    assert from_epoch_ms(routing.due_at_ms) == due
    assert routing.sent_at_ms == epoch_ms(sent)


def test_batch_builder_writes_the_same_headers_after_the_leading_ones() -> None:
    due = datetime(2026, 12, 31, 23, 59, 59, 250_001, tzinfo=UTC)
    sent = datetime(2026, 12, 31, 23, 59, 0, 999_999, tzinfo=UTC)
    leading = [("duetime-schema", b"0123456789abcdef")]
    target, tenant = RoutingHeaders.job_headers("api.example.com", "acme")
    built = RoutingHeaders(sent, leading).for_run(
        str(RUN_ID), 3, due, "http", target=target, tenant=tenant
    )
    assert built == leading + routing_headers(
        RUN_ID, 3, due, "http", sent, target_service="api.example.com", tenant="acme"
    )


def test_one_builder_gives_each_run_its_own_due_instant() -> None:
    """The builder remembers due headers by instant; runs of one batch due at the same instant
    share one, runs due apart never do, not even the two 01:30 of a DST overlap (equal
    datetimes in Python, an hour apart)."""
    sent = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
    target, tenant = RoutingHeaders.job_headers("svc", "acme")
    builder = RoutingHeaders(sent)
    first = datetime(2026, 11, 1, 1, 30, tzinfo=ZoneInfo("America/New_York"))
    dues = [sent, sent + timedelta(seconds=1), sent, first, first.replace(fold=1), first]
    for due in dues:
        built = builder.for_run(str(RUN_ID), 1, due, "kafka", target=target, tenant=tenant)
        routing = read_routing(_as_read(built))
        assert routing is not None and routing.due_at_ms == epoch_ms_ceil(due)
    assert epoch_ms_ceil(first.replace(fold=1)) - epoch_ms_ceil(first) == 3_600_000


def test_a_due_instant_between_milliseconds_is_rounded_up_never_down() -> None:
    due = datetime(2026, 1, 1, 0, 0, 0, 1_001, tzinfo=UTC)
    assert epoch_ms(due) == epoch_ms_ceil(due) - 1
    routing = read_routing(_as_read(routing_headers(RUN_ID, 1, due, "http", due)))
    assert routing is not None and from_epoch_ms(routing.due_at_ms) >= due
    whole = datetime(2026, 1, 1, 0, 0, 0, 2_000, tzinfo=UTC)
    assert epoch_ms_ceil(whole) == epoch_ms(whole)
    before_epoch = datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC)
    assert epoch_ms_ceil(before_epoch) == 0 and epoch_ms(before_epoch) == -1


def test_missing_or_malformed_headers_read_as_none() -> None:
    good = _as_read(routing_headers(RUN_ID, 1, datetime.now(UTC), "http", datetime.now(UTC)))
    assert read_routing(None) is None
    assert read_routing([h for h in good if h[0] != "duetime-run-id"]) is None
    for name, bad in (
        ("duetime-attempt", b"0"),
        ("duetime-attempt", b"x"),
        ("duetime-target-kind", b"ftp"),
        ("duetime-run-id", b"\xff"),
        # Only the canonical text routes: the router keys and forwards the bytes as they are.
        ("duetime-run-id", str(RUN_ID).upper().encode()),
        ("duetime-run-id", RUN_ID.hex.encode()),
        ("duetime-due-at-ms", b"soon"),
    ):
        assert read_routing([(k, bad if k == name else v) for k, v in good]) is None
    for name in ("duetime-run-id", "duetime-attempt", "duetime-due-at-ms", "duetime-target-kind"):
        assert read_routing([(k, None if k == name else v) for k, v in good]) is None


def test_a_repeated_header_counts_with_its_last_value() -> None:
    now = datetime.now(UTC)
    good = _as_read(routing_headers(RUN_ID, 1, now, "http", now))
    routing = read_routing([*good, ("duetime-attempt", b"2")])
    assert routing is not None and routing.attempt == 2
    assert read_routing([*good, ("duetime-attempt", None)]) is None
    # A header that is not a routing one changes nothing, whatever its value.
    assert read_routing([("other", None), *good, ("x-trace", b"\xff")]) == read_routing(good)
