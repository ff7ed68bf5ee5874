"""Bad input to the agent API: 400 saying what is wrong, field by field; never a 500, never a
traceback in the log. The OpenAPI schema of the agent API comes from the same models."""

from __future__ import annotations

import logging

import pytest
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from nodeagent.protocol import (
    DesiredState,
    ErrorAnswer,
    Heartbeat,
    Registration,
    RegistrationAnswer,
    SessionReport,
    WarmReport,
)
from scheduling.models import Gpu, Node
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit

from ...conftest import gpu_inventory, registration

pytestmark = pytest.mark.django_db


def agent(token: str | None = None) -> APIClient:
    client = APIClient()
    if token:
        client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


@pytest.fixture
def node_token(register_node) -> str:
    _, token = register_node("gpu-v", [gpu_inventory("GPU-v", 0, mig_slices=1)])
    return token


def refused(answer, *fields: str) -> dict:  # type: ignore[no-untyped-def]
    """A 400 that is an ErrorAnswer naming these fields."""
    assert answer.status_code == 400, answer.content
    body = ErrorAnswer.model_validate(answer.json())
    named = {error.field for error in body.errors}
    assert set(fields) <= named, (fields, body)
    for field in fields:
        assert f"{field}: " in body.detail or len(body.errors) > 5
    return answer.json()


def good_registration(hostname: str = "gpu-new") -> dict:
    join = do_create_join_token(hostname, actor="test")
    return registration(hostname, [gpu_inventory("GPU-n", 0, mig_slices=1)], join)


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        # Unknown fields are refused, never dropped: the drift this API had.
        (lambda b: b["gpus"][0].update(hbm_gb=80), ["gpus.0.hbm_gb"]),
        (lambda b: b.update(kernel="6.8"), ["kernel"]),
        (lambda b: b["gpus"][0].update(pcie_link_gen="fast"), ["gpus.0.pcie_link_gen"]),
        (lambda b: b["gpus"][0].update(pcie_link_width=70000), ["gpus.0.pcie_link_width"]),
        (
            lambda b: b["gpus"][0].update(pcie_topology={"GPU-x": "far"}),
            ["gpus.0.pcie_topology.GPU-x"],
        ),
        (lambda b: b["gpus"][0].update(sharing="slices"), ["gpus.0.sharing"]),
        (lambda b: b["gpus"][0].update(share_count=65), ["gpus.0.share_count"]),
        (lambda b: b["gpus"][0].update(compute_capability="x" * 11), ["gpus.0.compute_capability"]),
        (lambda b: b["gpus"][0]["mig_instances"][0].pop("uuid"), ["gpus.0.mig_instances.0.uuid"]),
        (lambda b: b.update(memory_mb=2**31), ["memory_mb"]),  # past the database column
        (lambda b: b.update(cpu_count=-1), ["cpu_count"]),
        (lambda b: b.update(hostname="gpu\x00evil"), ["hostname"]),  # PostgreSQL refuses NUL
        (lambda b: b.update(labels={"rack\x00": "r1"}), ["labels"]),
        (lambda b: b.update(labels=["rack"]), ["labels"]),
        (lambda b: b.update(runtime="podman"), ["runtime"]),
        (lambda b: b.pop("gpus"), ["gpus"]),
    ],
)
def test_a_bad_registration_is_refused_naming_the_field(change, fields, caplog) -> None:
    body = good_registration()
    change(body)
    with caplog.at_level(logging.DEBUG):
        answer = agent().post("/api/agent/v1/register/", body, format="json")
    refused(answer, *fields)
    assert not Node.objects.filter(hostname="gpu-new").exists()
    assert "Traceback" not in caplog.text


def test_the_error_answer_is_one_sentence_and_a_list() -> None:
    body = good_registration()
    body["gpus"][0].update(hbm_gb=80, index=-1)
    answer = refused(agent().post("/api/agent/v1/register/", body, format="json"))
    assert answer["detail"] == (
        "Invalid Registration: gpus.0.index: Input should be greater than or equal to 0; "
        "gpus.0.hbm_gb: Extra inputs are not permitted"
    )
    assert answer["errors"] == [
        {"field": "gpus.0.index", "message": "Input should be greater than or equal to 0",
         "type": "greater_than_equal"},
        {"field": "gpus.0.hbm_gb", "message": "Extra inputs are not permitted",
         "type": "extra_forbidden"},
    ]  # fmt: skip
    assert "80" not in str(answer)  # the input is not echoed back (it may be a token)


@pytest.mark.parametrize("body", [[], "register", 42])
def test_a_body_that_is_not_an_object_is_refused(body) -> None:  # type: ignore[no-untyped-def]
    answer = agent().post("/api/agent/v1/register/", body, format="json")
    refused(answer, "(body)")


def test_a_body_that_is_not_json_is_refused(node_token: str) -> None:
    form = agent(node_token).post("/api/agent/v1/heartbeat/", {"gpus": ""}, format="multipart")
    assert form.status_code == 415
    broken = agent(node_token).generic(
        "POST", "/api/agent/v1/heartbeat/", "{not json", content_type="application/json"
    )
    assert broken.status_code == 400 and "JSON parse error" in broken.json()["detail"]
    nan = agent(node_token).generic(
        "POST", "/api/agent/v1/heartbeat/", '{"gpus": [], "running_sessions": [NaN]}',
        content_type="application/json",
    )  # fmt: skip
    assert nan.status_code == 400


@pytest.mark.parametrize(
    ("metrics", "field"),
    [
        ({"xid_errors": list(range(33))}, "gpus.0.xid_errors"),  # at most XID_ERRORS_MAX
        ({"pcie_tx_kbps": -1}, "gpus.0.pcie_tx_kbps"),
        ({"fan_pct": "loud"}, "gpus.0.fan_pct"),
        ({"gpu_clock_mhz": 1410}, "gpus.0.gpu_clock_mhz"),
        ({"temperature_c": None, "power_w": None, "uuid": None}, "gpus.0.uuid"),
    ],
)
def test_bad_heartbeats_are_refused_and_change_nothing(node_token, metrics, field) -> None:
    sample = {"uuid": "GPU-v", "utilization_pct": 1.0, "memory_used_mb": 1,
              "temperature_c": 30.0, "power_w": 50.0}  # fmt: skip
    body = {"gpus": [{**sample, **metrics}], "running_sessions": []}
    refused(agent(node_token).post("/api/agent/v1/heartbeat/", body, format="json"), field)
    assert Gpu.objects.get(uuid="GPU-v").metrics == {}


@pytest.mark.parametrize(
    ("report", "field"),
    [
        ({"state": "EXPLODED"}, "state"),
        ({"state": "RUNNING", "port": 70000}, "port"),
        ({"state": "RUNNING", "port": "6080"}, None),  # a number in a string is taken
        ({"state": "RUNNING", "container_id": "c" * 101}, "container_id"),
        ({"state": "RUNNING", "host": "h" * 201}, "host"),
        ({"state": "FAILED", "reason": "r" * 301}, "reason"),
        ({"state": "RUNNING", "placement": "p" * 41}, "placement"),
        ({"state": "RUNNING", "exit_code": 0}, "exit_code"),
    ],
)
def test_bad_session_reports_are_refused(owner, profile, node_token, report, field) -> None:
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    answer = agent(node_token).post(
        f"/api/agent/v1/sessions/{session.pk}/report/", report, format="json"
    )
    if field is None:
        assert answer.status_code == 200, answer.content
    else:
        refused(answer, field)
        session.refresh_from_db()
        assert session.state == "PLACED"


def test_bad_warm_reports_are_refused(node_token) -> None:
    path = "/api/agent/v1/warm/b1-0000/report/"
    refused(agent(node_token).post(path, {"state": "RUNNING"}, format="json"), "state")
    refused(agent(node_token).post(path, {"state": "READY", "port": 0}, format="json"), "port")


def test_a_header_that_is_not_ascii_is_unauthorized() -> None:
    answer = agent().get("/api/agent/v1/desired/", HTTP_AUTHORIZATION="Node t\u00f6ken")
    assert answer.status_code == 401


def test_the_portals_answers_are_the_models(owner, profile, register_node) -> None:
    """What the portal sends validates with the agent's models, with no field they lack."""
    join = do_create_join_token("gpu-m", actor="test")
    body = registration("gpu-m", [gpu_inventory("GPU-m", 0, mig_slices=1)], join)
    registered = agent().post("/api/agent/v1/register/", body, format="json").json()
    RegistrationAnswer.model_validate(registered)
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    desired = agent(registered["node_token"]).get("/api/agent/v1/desired/").json()
    state = DesiredState.model_validate(desired)
    assert [s.session_id for s in state.sessions] == [session.pk]
    # Nothing the models do not define (an answer field would be ignored by the agent).
    for entry in desired["sessions"]:
        assert set(entry) <= set(type(state.sessions[0]).model_fields)
    assert set(desired) <= set(DesiredState.model_fields)


def test_the_openapi_schema_of_the_agent_api_comes_from_the_models() -> None:
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    validate_schema(schema)  # OpenAPI 3.0: nullable, not pydantic's "null" type
    components = schema["components"]["schemas"]
    for model in (Registration, Heartbeat, SessionReport, WarmReport, DesiredState, ErrorAnswer):
        component = components[model.__name__]
        assert set(component["properties"]) == set(model.model_fields), model
    assert components["Registration"]["additionalProperties"] is False  # unknown: refused
    topology = components["GpuInventory"]["properties"]["pcie_topology"]
    assert topology["nullable"] is True and topology["additionalProperties"]["pattern"]
    assert schema["paths"]["/api/agent/v1/desired/"]["get"]["security"] == [{"nodeToken": []}]
    register = schema["paths"]["/api/agent/v1/register/"]["post"]
    body = register["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/Registration"}
    answers = {
        code: r["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        for code, r in register["responses"].items()
    }
    assert answers == {
        "200": "RegistrationAnswer", "201": "RegistrationAnswer", "400": "ErrorAnswer",
        "401": "DetailAnswer", "409": "ConflictAnswer", "415": "DetailAnswer",
    }  # fmt: skip
    desired = schema["paths"]["/api/agent/v1/desired/"]["get"]["responses"]["200"]
    assert desired["content"]["application/json"]["schema"]["$ref"].endswith("/DesiredState")
    for path, item in schema["paths"].items():
        if path.startswith("/api/agent/"):
            for operation in item.values():
                for answer in operation["responses"].values():
                    assert "content" in answer, (path, answer)  # typed, never a bare object
