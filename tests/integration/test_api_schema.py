"""schemathesis against ``/openapi.json``: generated requests to every operation, on a real
PostgreSQL, never get a 5xx, and every answer matches the document.

Bounded (``_EXAMPLES`` per operation) so the whole test takes seconds, not minutes. The
operations are walked by hand with hypothesis rather than through schemathesis's pytest plugin,
which does not run under this pytest.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from .api_client import http_job, open_api

pytestmark = pytest.mark.integration

_EXAMPLES = 25


def test_no_server_errors(database_url: str) -> None:
    with open_api(database_url) as api:
        admin = api.token(None)
        # Something to find: a job (so job paths can hit a row) and a run of it.
        api.client.post("/v1/jobs", json=http_job("seed", tenant="acme"), headers=admin)
        api.client.post("/v1/jobs/seed/trigger", headers=admin)
        schema = schemathesis.openapi.from_asgi("/openapi.json", api.client.app)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 17
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=_EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case: Any) -> None:
                response = case.call(headers=admin)
                case.validate_response(
                    response, checks=[not_a_server_error, response_schema_conformance]
                )

            check()
