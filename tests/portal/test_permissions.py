"""A student cannot read, stop or open another student's session: API, pages, WebSocket."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from scheduling.choices import Purpose, SessionState
from scheduling.models import Session
from scheduling.services.sessions import check_submit, do_submit

from .test_api import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_session(owner, profile):
    session = do_submit(owner, check_submit(owner, profile.pk, Purpose.HOBBY, None))
    Session.objects.filter(pk=session.pk).update(
        state=SessionState.RUNNING, desktop_host="127.0.0.1", desktop_port=9
    )
    return session


def test_api_hides_another_students_session(stranger, running_session):
    client = client_for(stranger)
    assert client.get(f"/api/v1/sessions/{running_session.pk}/").status_code == 404
    assert client.post(f"/api/v1/sessions/{running_session.pk}/stop/").status_code == 404
    assert client.get("/api/v1/sessions/").json() == []
    running_session.refresh_from_db()
    assert running_session.state == SessionState.RUNNING


def test_pages_hide_another_students_session(stranger, running_session):
    browser = Client()
    browser.force_login(stranger)
    assert browser.get(f"/sessions/{running_session.pk}/").status_code == 404
    assert browser.get(f"/desktop/{running_session.pk}/").status_code == 404
    assert browser.post(f"/sessions/{running_session.pk}/stop/").status_code == 404
    running_session.refresh_from_db()
    assert running_session.state == SessionState.RUNNING


def test_owner_sees_the_desktop_page(owner, running_session):
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/desktop/{running_session.pk}/")
    assert page.status_code == 200
    assert b'id="screen"' in page.content
    # The way back leads to the session page, not to the API route of the same shape.
    assert f'href="/sessions/{running_session.pk}/"'.encode() in page.content


def _connect_desktop(user, session_id: int) -> tuple[bool, int | None]:
    from portal.consumers import DesktopProxyConsumer

    async def attempt():
        communicator = WebsocketCommunicator(
            DesktopProxyConsumer.as_asgi(), f"/ws/desktop/{session_id}/"
        )
        communicator.scope["user"] = user
        communicator.scope["url_route"] = {"kwargs": {"session_id": session_id}}
        connected, code = await communicator.connect()
        await communicator.disconnect()
        return connected, code

    return async_to_sync(attempt)()


@pytest.mark.django_db(transaction=True)
def test_desktop_websocket_refuses_another_student(stranger, running_session):
    connected, code = _connect_desktop(stranger, running_session.pk)
    assert not connected
    assert code == 4403


@pytest.mark.django_db(transaction=True)
def test_desktop_websocket_lets_the_owner_through_to_the_desktop(owner, running_session):
    # Port 9 has nothing listening: the owner passes the permission check and the proxy
    # then reports the desktop unreachable (4502), not forbidden (4403).
    connected, code = _connect_desktop(owner, running_session.pk)
    assert not connected
    assert code == 4502


def test_a_guardian_grant_lets_an_instructor_read_but_not_open_or_stop(make_user, running_session):
    from guardian.shortcuts import assign_perm

    instructor = make_user("ines")
    client = client_for(instructor)
    assert client.get(f"/api/v1/sessions/{running_session.pk}/").status_code == 404
    assign_perm("scheduling.view_session", instructor, running_session)
    answer = client.get(f"/api/v1/sessions/{running_session.pk}/")
    assert answer.status_code == 200
    assert answer.json()["state"] == "RUNNING"
    browser = Client()
    browser.force_login(instructor)
    assert browser.get(f"/desktop/{running_session.pk}/").status_code == 404
    assert browser.post(f"/sessions/{running_session.pk}/stop/").status_code == 404
