"""The batch statements' array literals read back as the values they were built from."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import psycopg

from duetime.store.arrays import instants, numbers, uuids


def test_literals_round_trip_through_postgresql(database_url: str) -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    east = timezone(timedelta(hours=5, minutes=30))
    stamps = [
        datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=east),
        None,
    ]
    # Repeats are formatted once: the same instant again, and again in another offset.
    stamps += [stamps[0], None, stamps[0].astimezone(east)]
    ints = [0, -7, None, 2**40]
    floats = [0.0, 1500.5, 1e-05, None]
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT CAST(%s AS uuid[]), CAST(%s AS timestamptz[]), CAST(%s AS bigint[]),"
            " CAST(%s AS double precision[])",
            (uuids(ids), instants(stamps), numbers(ints), numbers(floats)),
        ).fetchone()
    assert row is not None
    assert row[0] == ids
    assert row[1] == stamps  # the same instants (aware datetimes compare across offsets)
    assert row[2] == ints
    assert row[3] == floats


def test_empty_literals_are_empty_arrays(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT CAST(%s AS uuid[]), CAST(%s AS timestamptz[]), CAST(%s AS integer[])",
            (uuids([]), instants([]), numbers([])),
        ).fetchone()
    assert row == ([], [], [])
