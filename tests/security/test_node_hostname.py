"""A node's hostname is a hostname (issue 36, item 5).

Its name reached the portal from the agent's registration (and a join token's host from the
console) as any text of up to 200 characters: HTML, newlines, right-to-left overrides. One
check, :func:`nodeagent.addresses.node_hostname` (an RFC 1123 hostname or an IP address),
now stands behind the registration (the protocol's ``NodeHostname``), the agent's start, the
join tokens (console and ``manage.py create_join_token``) and the Django admin's node form.
"""

from __future__ import annotations

import logging

import pytest
from django.contrib import admin
from django.forms.models import model_to_dict
from django.test import RequestFactory
from pydantic import ValidationError
from rest_framework.test import APIClient

from nodeagent.__main__ import main as agent_main
from nodeagent.addresses import node_hostname
from nodeagent.protocol import Registration
from scheduling.models import Node
from scheduling.services import ServiceError
from scheduling.services.nodes import check_join_token, do_create_join_token

from ..conftest import gpu_inventory, registration

REGISTER = "/api/agent/v1/register/"
BAD = ["<b>x</b>", "a\nb", "\u202eevil", "a" * 254, "-lead", "gpu\n", "a_b", "gpu a01", ""]
GOOD = ["ok-node-1.campus.edu", "10.0.0.5", "::1", "GPU-A01", "gpu-a01"]


@pytest.mark.parametrize("name", BAD)
def test_what_is_not_a_hostname_is_refused_saying_what_it_must_be(name: str) -> None:
    with pytest.raises(ValueError, match="must be a hostname or an IP address"):
        node_hostname(name)
    body = registration(name, [gpu_inventory("GPU-n", 0, mig_slices=1)], "a-join-token")
    with pytest.raises(ValidationError) as refused:
        Registration.model_validate(body)
    assert [e["loc"] for e in refused.value.errors()] == [("hostname",)]


@pytest.mark.parametrize("name", GOOD)
def test_hostnames_and_ip_addresses_are_taken_as_written(name: str) -> None:
    assert node_hostname(name) == name
    body = registration(name, [gpu_inventory("GPU-n", 0, mig_slices=1)], "a-join-token")
    assert Registration.model_validate(body).hostname == name


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["<b>x</b>", "a\nb", "\u202eevil", "a" * 254, "-lead"])
def test_the_registration_api_refuses_it_with_400_naming_the_field(name: str, caplog) -> None:  # type: ignore[no-untyped-def]
    body = registration(name, [gpu_inventory("GPU-n", 0, mig_slices=1)], "x")
    with caplog.at_level(logging.DEBUG):
        answer = APIClient().post(REGISTER, body, format="json")
    assert answer.status_code == 400, answer.content
    assert {e["field"] for e in answer.json()["errors"]} == {"hostname"}
    detail = answer.json()["detail"]
    assert detail.startswith("Invalid Registration: hostname: ")
    assert "must be a hostname or an IP address" in detail or "at most 200" in detail
    assert not Node.objects.exists()
    assert "Traceback" not in caplog.text


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["ok-node-1.campus.edu", "10.0.0.5", "::1"])
def test_the_registration_api_takes_a_hostname_or_an_ip_address(name: str) -> None:
    token = do_create_join_token(name, actor="test")
    body = registration(name, [gpu_inventory("GPU-n", 0, mig_slices=1)], token)
    answer = APIClient().post(REGISTER, body, format="json")
    assert answer.status_code == 201, answer.content
    assert Node.objects.get().hostname == name


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["<b>x</b>", "a\nb", "\u202eevil", "-lead"])
def test_a_join_token_for_a_bad_hostname_is_refused(name: str) -> None:
    with pytest.raises(ServiceError) as refused:
        check_join_token(name, any_host=False, hours=24, may_replace=False)
    assert refused.value.field == "hostname"
    assert "is not a hostname" in refused.value.message
    assert check_join_token("gpu-a01", any_host=False, hours=24, may_replace=False) == "gpu-a01"


@pytest.mark.django_db
def test_the_admins_node_form_refuses_a_bad_hostname(register_node, admin_user) -> None:  # type: ignore[no-untyped-def]
    node, _ = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    request = RequestFactory().get("/")
    request.user = admin_user
    node_admin = admin.site._registry[Node]
    form_class = node_admin.get_form(request, obj=node)
    data = {k: v for k, v in model_to_dict(node).items() if k in form_class.base_fields}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    form = form_class(data={**data, "hostname": "<b>x</b>"}, instance=node)
    assert not form.is_valid()
    assert "is not a hostname" in str(form.errors["hostname"])
    form = form_class(data={**data, "address": "10.0.0.5:6080"}, instance=node)
    assert not form.is_valid() and "address" in form.errors
    assert form_class(data={**data, "hostname": "gpu-a02"}, instance=node).is_valid()


def test_the_agent_will_not_start_under_a_name_that_is_not_a_hostname(capsys) -> None:  # type: ignore[no-untyped-def]
    assert agent_main(["--node", "<b>x</b>", "--once"]) == 2
    assert "the node name '<b>x</b>' must be a hostname" in capsys.readouterr().err
