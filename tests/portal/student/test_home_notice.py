"""Homes on several nodes (issue 13): the agent says at registration whether its homes are
shared (``DESKPOOL_HOME_ROOT``), the portal keeps it on the node, and the session page says
plainly where the student's home folder is."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone, translation
from rest_framework.test import APIClient

from scheduling.models import Node, Session
from scheduling.services.nodes import do_create_join_token
from tests.conftest import registration

pytestmark = pytest.mark.django_db

SHARED = "Your home folder follows you: desktops on other nodes that share homes see the same"
PER_NODE = "Your home folder is kept on node {node} only: a desktop started on another node"


@pytest.fixture(autouse=True)
def _default_language_and_zone_after():
    yield
    translation.deactivate()
    timezone.deactivate()


def register(hostname: str, **extra: object) -> tuple[Node, str]:
    """Register through the agent API, as the agent does; the node and its token."""
    body = {**registration(hostname, [], do_create_join_token(hostname, actor="test")), **extra}
    answer = APIClient().post("/api/agent/v1/register/", body, format="json")
    assert answer.status_code == 201, answer.content
    return Node.objects.get(pk=answer.json()["node_id"]), answer.json()["node_token"]


def signed_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return client


def running_on(node: Node, user, profile) -> Session:  # type: ignore[no-untyped-def]
    return Session.objects.create(
        user=user,
        profile=profile,
        purpose="hobby",
        state="RUNNING",
        node=node,
        started_at=timezone.now(),
    )


def test_registration_stores_whether_homes_are_shared() -> None:
    shared, token = register("gpu-shared", home_root_shared=True)
    assert shared.home_root_shared is True
    plain, _ = register("gpu-plain")  # an older agent sends nothing: per node
    assert plain.home_root_shared is False

    # A later registration (the agent restarted without the root) changes it.
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION="Node " + token)
    body = {**registration("gpu-shared", []), "home_root_shared": False}
    assert agent.post("/api/agent/v1/register/", body, format="json").status_code == 200
    shared.refresh_from_db()
    assert shared.home_root_shared is False
    wrong = {**registration("gpu-shared", []), "home_root_shared": "maybe"}
    assert agent.post("/api/agent/v1/register/", wrong, format="json").status_code == 400


def test_the_session_page_says_the_home_follows_on_shared_nodes(owner, profile) -> None:  # type: ignore[no-untyped-def]
    node, _ = register("gpu-nfs", home_root_shared=True)
    session = running_on(node, owner, profile)

    page = signed_in(owner).get(f"/sessions/{session.pk}/").content.decode()

    assert 'id="home-notice"' in page
    assert SHARED in page
    assert PER_NODE.format(node="gpu-nfs") not in page


def test_the_session_page_says_the_home_stays_on_a_node_without_shared_homes(
    owner, profile
) -> None:  # type: ignore[no-untyped-def]
    node, _ = register("gpu-local")
    session = running_on(node, owner, profile)

    page = signed_in(owner).get(f"/sessions/{session.pk}/").content.decode()

    assert PER_NODE.format(node="gpu-local") in page
    assert "(for example after a requeue) starts with a different, empty home." in page
    assert SHARED not in page


def test_no_notice_before_placement_or_after_the_end(owner, profile) -> None:  # type: ignore[no-untyped-def]
    node, _ = register("gpu-local")
    waiting = Session.objects.create(user=owner, profile=profile, purpose="hobby")
    ended = running_on(node, owner, profile)
    Session.objects.filter(pk=ended.pk).update(state="ENDED", ended_at=timezone.now())
    client = signed_in(owner)

    for session in (waiting, ended):
        page = client.get(f"/sessions/{session.pk}/").content.decode()
        assert page.count(f'data-session-id="{session.pk}"') >= 1
        assert 'id="home-notice"' not in page


def test_another_persons_session_page_is_not_found(owner, stranger, profile) -> None:  # type: ignore[no-untyped-def]
    node, _ = register("gpu-local")
    session = running_on(node, owner, profile)

    answer = signed_in(stranger).get(f"/sessions/{session.pk}/")

    assert answer.status_code == 404
    assert "gpu-local" not in answer.content.decode()
