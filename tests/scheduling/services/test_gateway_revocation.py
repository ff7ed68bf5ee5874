"""Revoking gateway tickets (issue 34, item 4): a ticket whose holder signed out, was disabled
or lost the right to the desktop is listed in its session's desired state, and the node is
woken at once (its desired version bumped) so that its gateway closes it within 2 s. Tickets
of people still signed in, closed tickets and unopened expired ones are not listed; old rows
are purged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from people.tokens import ApiToken
from scheduling.choices import SessionState
from scheduling.models import GatewayTicket, Session
from scheduling.services.agent_sessions import desired_state
from scheduling.services.agent_wake import desired_version
from scheduling.services.api_tokens import end_every_session, issue_token
from scheduling.services.gateway_tickets import (
    TOKEN_MARKER,
    check_gateway_open,
    do_issue_ticket,
    do_purge_gateway_tickets,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def desktop(gateway_desktop):  # type: ignore[no-untyped-def]
    return gateway_desktop


def signed_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def ticket_for(user, session, login: str) -> str:  # type: ignore[no-untyped-def]
    do_issue_ticket(user, check_gateway_open(user, session.pk, "screen"), "screen", login, None)
    return GatewayTicket.objects.latest("pk").jti


def revoked(session) -> dict[str, str]:  # type: ignore[no-untyped-def]
    state = desired_state(session.node)
    [desired] = [s for s in state.sessions if s.session_id == session.pk]
    return {r.ticket: r.why for r in desired.revoked_tickets}


def test_logging_out_revokes_that_sign_ins_tickets_and_wakes_the_node(
    desktop, owner, django_capture_on_commit_callbacks
):
    browser, other_browser = signed_in(owner), signed_in(owner)
    gone = ticket_for(owner, desktop, browser.session.session_key)
    kept = ticket_for(owner, desktop, other_browser.session.session_key)
    assert revoked(desktop) == {}
    version = desired_version(desktop.node_id)

    with django_capture_on_commit_callbacks(execute=True):
        browser.logout()

    assert desired_version(desktop.node_id) > version
    assert revoked(desktop) == {gone: "signed_out"}
    assert kept not in revoked(desktop)


def test_a_disabled_account_is_signed_out_everywhere(
    desktop, owner, django_capture_on_commit_callbacks
):
    jti = ticket_for(owner, desktop, signed_in(owner).session.session_key)
    version = desired_version(desktop.node_id)
    with django_capture_on_commit_callbacks(execute=True):
        owner.is_active = False
        owner.save()
    assert desired_version(desktop.node_id) > version
    assert revoked(desktop) == {jti: "signed_out"}


def test_an_admin_made_a_plain_user_may_no_longer_open_anothers_desktop(
    desktop, owner, admin_user, django_capture_on_commit_callbacks
):
    admins = ticket_for(admin_user, desktop, signed_in(admin_user).session.session_key)
    owners = ticket_for(owner, desktop, signed_in(owner).session.session_key)
    version = desired_version(desktop.node_id)
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.is_staff = admin_user.is_superuser = False
        admin_user.save()
    assert desired_version(desktop.node_id) > version
    assert revoked(desktop) == {admins: "forbidden"}
    assert owners not in revoked(desktop)


def test_an_admin_ending_a_persons_sessions_revokes_their_tickets(
    desktop, owner, django_capture_on_commit_callbacks
):
    jti = ticket_for(owner, desktop, signed_in(owner).session.session_key)
    token, _plain = issue_token(owner, "script")
    by_token = ticket_for(owner, desktop, f"{TOKEN_MARKER}{token.pk}")
    assert revoked(desktop) == {}
    version = desired_version(desktop.node_id)
    with django_capture_on_commit_callbacks(execute=True):
        end_every_session(owner, actor="user:root")
    assert desired_version(desktop.node_id) > version
    assert revoked(desktop) == {jti: "signed_out", by_token: "signed_out"}
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None


def test_closed_and_expired_tickets_are_not_listed(desktop, owner):
    browser = signed_in(owner)
    closed = ticket_for(owner, desktop, browser.session.session_key)
    expired = ticket_for(owner, desktop, browser.session.session_key)
    now = timezone.now()
    GatewayTicket.objects.filter(jti=closed).update(opened_at=now, closed_at=now)
    GatewayTicket.objects.filter(jti=expired).update(expires_at=now - timedelta(seconds=1))
    browser.logout()
    assert revoked(desktop) == {}


def test_an_ended_desktops_tickets_leave_with_it(desktop, owner):
    ticket_for(owner, desktop, signed_in(owner).session.session_key)
    Session.objects.filter(pk=desktop.pk).update(state=SessionState.ENDED)
    assert desired_state(desktop.node).sessions == []


def test_rows_done_with_for_a_day_are_purged(desktop, owner):
    login = signed_in(owner).session.session_key
    jtis = [ticket_for(owner, desktop, login) for _ in range(4)]
    long_ago = timezone.now() - timedelta(days=2)
    GatewayTicket.objects.filter(jti=jtis[0]).update(opened_at=long_ago, closed_at=long_ago)
    GatewayTicket.objects.filter(jti=jtis[1]).update(issued_at=long_ago, expires_at=long_ago)
    GatewayTicket.objects.filter(jti=jtis[2]).update(issued_at=long_ago, opened_at=long_ago)
    assert do_purge_gateway_tickets(timezone.now()) == 2  # the open one stays while it runs
    assert set(GatewayTicket.objects.values_list("jti", flat=True)) == {jtis[2], jtis[3]}
    Session.objects.filter(pk=desktop.pk).update(state=SessionState.ENDED)
    assert do_purge_gateway_tickets(timezone.now()) == 1
