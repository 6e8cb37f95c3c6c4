"""Log lines: a stable event name first, then key=value fields that split unambiguously."""

from __future__ import annotations

import logging
import uuid

import pytest

from duetime_workers.logs import event


def test_event_line_and_structured_fields(caplog: pytest.LogCaptureFixture) -> None:
    run_id = uuid.UUID("11111111-2222-3333-4444-555555555555")
    with caplog.at_level(logging.INFO, logger="duetime.worker"):
        event(
            "run.failed",
            logging.WARNING,
            run_id=run_id,
            attempt=2,
            tenant="acme",
            error='HTTP 500 "oops"',
            status_code=None,
        )
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "run.failed run_id=11111111-2222-3333-4444-555555555555 attempt=2 tenant=acme "
        'error="HTTP 500 \\"oops\\""'
    )
    assert record.event == "run.failed"  # type: ignore[attr-defined]
    assert record.fields["attempt"] == 2  # type: ignore[attr-defined]
    assert "status_code" not in record.fields  # type: ignore[attr-defined]


def test_disabled_levels_cost_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="duetime.worker"):
        event("run.claimed", run_id="x")
    assert caplog.records == []
