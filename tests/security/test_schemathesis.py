"""The user API and the agent API against their own OpenAPI schema (issue 14, "Checked in
CI"), with Schemathesis: a real portal process (daphne) on 127.0.0.1, every operation of
``/api/schema/`` under ``/api/v1/`` (as a student, with an API token from the token
endpoint) and under ``/api/agent/v1/`` (as a registered node, with its node token), cases
generated from the schema (valid ones, then invalid ones), each answer checked for: no
server error, a status code the schema documents, its content type, and a body that
matches the schema.

Bounded to run in well under two minutes on two cores: a fixed number of examples per
operation, derandomized (the same cases every run), no shrinking.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import give_thesis_grant, gpu_inventory
from tests.integration.stack import Stack

pytestmark = [pytest.mark.integration]

EXAMPLES = 12  # per operation and generation mode (the agent API's few: 40)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
PASSWORD = "schemathesis-pw-1"


def token_of(portal: Stack, username: str) -> str:
    request = urllib.request.Request(
        portal.url + "/api/v1/auth/token/",
        data=json.dumps({"username": username, "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["token"]


def refused_by_daphne(case, response) -> bool:
    """A multipart body Twisted cannot parse is answered a bare 400 (no headers, no body) by
    daphne's HTTP layer, before the portal sees the request: not the portal's answer."""
    return (
        case.media_type == "multipart/form-data"
        and response.status_code == 400
        and "content-type" not in response.headers
        and not response.content
    )


def run_schema(
    portal: Stack,
    path_regex: str,
    headers: dict[str, str],
    examples: int = EXAMPLES,
    method: str | None = None,
) -> list[str]:
    """Every operation under ``path_regex`` (of ``method``, if given), valid then invalid
    cases; the failures."""
    schema = schemathesis.openapi.from_url(portal.url + "/api/schema/").include(
        path_regex=path_regex, **({"method": method} if method else {})
    )
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=examples,
                derandomize=True,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def check(case) -> None:
                response = case.call(base_url=portal.url, headers=headers)
                if not refused_by_daphne(case, response):
                    case.validate_response(response, checks=CHECKS)

            try:
                check()
            except Unsatisfiable:
                pass  # no invalid case exists (an operation without parameters or body)
            except (AssertionError, BaseExceptionGroup) as error:  # reported below
                failures.append(f"{operation.label} ({mode.value}): {error}"[:3000])
    assert operations, f"no operation under {path_regex}"
    return failures


@pytest.mark.django_db(transaction=True)
def test_the_user_api_conforms_to_its_schema(daphne_portal, make_user, profile, pool):
    student = make_user("student-st")
    student.set_password(PASSWORD)
    student.save()
    give_thesis_grant(student)
    token = token_of(daphne_portal, "student-st")
    failures = run_schema(daphne_portal, r"^/api/v1/", {"Authorization": f"Token {token}"})
    Path("test-output/schemathesis-user-api.txt").write_text("\n\n".join(failures))
    assert not failures, "\n\n".join(failures)


@pytest.mark.django_db(transaction=True)
def test_the_agent_api_conforms_to_its_schema(daphne_portal, register_node, profile):
    _node, node_token = register_node("st-node", [gpu_inventory("GPU-st", 0, mig_slices=2)])
    agent = {"Authorization": f"Node {node_token}"}
    failures = run_schema(daphne_portal, r"^/api/agent/v1/", agent, examples=40)
    Path("test-output/schemathesis-agent-api.txt").write_text("\n\n".join(failures))
    assert not failures, "\n\n".join(failures)


@pytest.mark.django_db(transaction=True)
def test_what_the_user_api_shows_admins_conforms_to_its_schema(daphne_portal, make_user, pool):
    """The admins' reads (the pool, alerts, usage, prices): a student only ever sees 403."""
    admin = make_user("admin-st", is_staff=True, is_superuser=True)
    admin.set_password(PASSWORD)
    admin.save()
    token = token_of(daphne_portal, "admin-st")
    auth = {"Authorization": f"Token {token}"}
    failures = run_schema(daphne_portal, r"^/api/v1/", auth, examples=4, method="GET")
    Path("test-output/schemathesis-admin-reads.txt").write_text("\n\n".join(failures))
    assert not failures, "\n\n".join(failures)
