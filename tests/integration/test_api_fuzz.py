"""Every operation of the REST API fuzzed from its own OpenAPI schema, over real HTTP, on the
real Redis and Postgres.

The API's promise to a careless or hostile client is that no input is a 5xx, and what it
answers is what its schema says (status, content type, body). Hand-written sweeps
(test_abuse_sweep.py) pin the findings; this test generates inputs the sweeps did not think
of, from the same schema clients are generated from.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.api.app import create_app
from app.config import Settings
from app.services.tenants import mint_key
from tests.integration.api_server import prefixed, serve

# Examples per operation; ~30 operations, so some 1,500 requests in all.
EXAMPLES = 50
SCHEMA = schemathesis.openapi.from_dict(create_app().openapi())
OPERATIONS = [found.ok().label for found in SCHEMA.get_all_operations()]
CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def served(base_settings: Settings) -> Iterator[tuple[str, dict[str, str]]]:
    """The API's base URL and the headers of one tenant's key."""
    with prefixed(base_settings, "fuzz") as api_settings, serve(api_settings) as url:
        key = mint_key(f"t-fuzz-{uuid.uuid4().hex[:8]}", name="fuzz").key
        yield url, {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("label", OPERATIONS)
def test_no_input_is_a_server_error_and_every_answer_is_as_documented(
    label: str, served: tuple[str, dict[str, str]]
) -> None:
    url, headers = served

    @given(case=SCHEMA.find_operation_by_label(label).as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def answered_as_documented(case: Any) -> None:
        case.call_and_validate(base_url=url, headers=headers, checks=CHECKS)

    answered_as_documented()
