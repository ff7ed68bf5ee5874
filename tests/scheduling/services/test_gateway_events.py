"""What a node's gateway reports (issue 34): an open audited once as the relays audited it (a
screen also counted as a viewer), input counted for idle detection, the close recorded; a
batch sent again changes nothing; another node's tickets are not this node's to report; a home
file's upload or download that went through whole is audited once (home.uploaded,
home.downloaded), one cut short is not."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from nodeagent.protocol_gateway import TRANSFER_DONE, GatewayEvent
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, GatewayTicket, SessionActivity
from scheduling.services.gateway_events import do_gateway_events
from scheduling.services.gateway_tickets import check_gateway_open, do_issue_ticket
from scheduling.services.home_transfers import check_transfer_on, do_issue_transfer_ticket

from ...conftest import gpu_inventory, sign_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def desktop(gateway_desktop):  # type: ignore[no-untyped-def]
    return gateway_desktop


def ticket_of(user, session, purpose="screen") -> GatewayTicket:  # type: ignore[no-untyped-def]
    checked = check_gateway_open(user, session.pk, purpose)
    do_issue_ticket(user, checked, purpose, sign_in(user), None)
    return GatewayTicket.objects.latest("pk")


def event(ticket: GatewayTicket, kind: str, **fields) -> GatewayEvent:  # type: ignore[no-untyped-def]
    return GatewayEvent(
        kind=kind,  # type: ignore[arg-type]
        ticket=ticket.jti,
        session_id=ticket.session_id,
        purpose=ticket.purpose,  # type: ignore[arg-type]
        at=fields.pop("at", timezone.now()),
        **fields,
    )


def test_a_screen_opened_is_audited_once_and_counted_as_a_viewer(desktop, admin_user):
    ticket = ticket_of(admin_user, desktop)
    opened = event(ticket, "opened", address="10.9.8.7")

    assert do_gateway_events(desktop.node, [opened]) == 1
    assert do_gateway_events(desktop.node, [opened]) == 1  # the batch again: no second row

    audit = AuditEvent.objects.get(kind=AuditKind.DESKTOP_OPENED)
    assert (audit.actor, audit.session_id, audit.node_id, audit.address) == (
        "user:root",
        desktop.pk,
        desktop.node_id,
        "10.9.8.7",
    )
    assert audit.data == {"viewer": "root", "owner": "ada", "as": "admin"}
    assert SessionActivity.objects.get(session=desktop).viewers == 1
    row = GatewayTicket.objects.get(pk=ticket.pk)
    assert (row.opened_at, row.address) == (opened.at, "10.9.8.7")


def test_input_is_counted_and_the_close_ends_the_viewer_once(desktop, owner):
    ticket = ticket_of(owner, desktop)
    at = timezone.now()
    batch = [
        event(ticket, "opened", at=at),
        event(ticket, "input", input_events=7, input_at=at + timedelta(seconds=3)),
        event(ticket, "closed", at=at + timedelta(seconds=9), input_events=2),
    ]
    assert do_gateway_events(desktop.node, batch) == 3
    assert do_gateway_events(desktop.node, batch[2:]) == 1  # a close sent again

    activity = SessionActivity.objects.get(session=desktop)
    assert (activity.viewers, activity.input_events) == (0, 9)
    assert activity.last_input_at is not None and activity.last_input_at >= at
    assert GatewayTicket.objects.get(pk=ticket.pk).closed_at == batch[2].at
    assert AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).count() == 1


def test_sound_opened_is_audited_as_sound_and_is_no_viewer(desktop, owner):
    ticket = ticket_of(owner, desktop, "sound")
    do_gateway_events(desktop.node, [event(ticket, "opened"), event(ticket, "closed")])
    audit = AuditEvent.objects.get(kind=AuditKind.DESKTOP_SOUND_OPENED)
    assert audit.data == {"viewer": "ada", "owner": "ada", "as": "owner"}
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).exists()
    assert not SessionActivity.objects.filter(session=desktop, viewers__gt=0).exists()


def test_another_nodes_tickets_are_ignored_and_not_counted(desktop, owner, register_node):
    other, _token = register_node("gw-other", [gpu_inventory("GPU-x", 0, mig_slices=1)])
    ticket = ticket_of(owner, desktop)
    assert do_gateway_events(other, [event(ticket, "opened"), event(ticket, "closed")]) == 0
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).exists()
    assert GatewayTicket.objects.get(pk=ticket.pk).opened_at is None


def test_an_event_that_misnames_its_ticket_is_ignored(desktop, owner):
    ticket = ticket_of(owner, desktop)
    wrong_purpose = event(ticket, "opened").model_copy(update={"purpose": "sound"})
    wrong_session = event(ticket, "opened").model_copy(update={"session_id": desktop.pk + 1})
    unknown = event(ticket, "opened").model_copy(update={"ticket": "x" * 22})
    assert do_gateway_events(desktop.node, [wrong_purpose, wrong_session, unknown]) == 0
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).exists()


def transfer_ticket(user, session, purpose: str, path: str) -> GatewayTicket:  # type: ignore[no-untyped-def]
    transfer = check_transfer_on(user, session.pk, purpose, path, size=6)
    do_issue_transfer_ticket(user, transfer, sign_in(user), None)
    return GatewayTicket.objects.latest("pk")


def test_a_transfer_that_went_through_is_audited_once_with_its_bytes(desktop, owner):
    upload = transfer_ticket(owner, desktop, "upload", "notes/a.txt")
    download = transfer_ticket(owner, desktop, "download", "notes/a.txt")
    batch = [
        event(upload, "opened", address="10.9.8.7"),
        event(upload, "closed", bytes_in=6, reason=TRANSFER_DONE),
        event(download, "opened"),
        event(download, "closed", bytes_out=6, reason=TRANSFER_DONE),
    ]
    assert do_gateway_events(desktop.node, batch) == 4
    assert do_gateway_events(desktop.node, batch) == 4  # the batch again: no second row

    rows = AuditEvent.objects.filter(kind__in=[AuditKind.HOME_UPLOADED, AuditKind.HOME_DOWNLOADED])
    assert sorted(
        (r.kind, r.actor, r.session_id, r.data["path"], r.data["size"]) for r in rows
    ) == [
        (AuditKind.HOME_DOWNLOADED, "user:ada", desktop.pk, "notes/a.txt", 6),
        (AuditKind.HOME_UPLOADED, "user:ada", desktop.pk, "notes/a.txt", 6),
    ]
    assert {r.data["ticket"] for r in rows} == {upload.jti, download.jti}
    # A transfer is no viewer and no sound listener.
    assert not AuditEvent.objects.filter(kind=AuditKind.DESKTOP_OPENED).exists()


def test_a_transfer_cut_short_or_refused_is_not_audited_as_done(desktop, owner):
    cut = transfer_ticket(owner, desktop, "upload", "big.bin")
    full = transfer_ticket(owner, desktop, "upload", "huge.bin")
    do_gateway_events(
        desktop.node,
        [
            event(cut, "opened"),
            event(cut, "closed", bytes_in=3, reason="cut short"),
            event(full, "opened"),
            event(full, "closed", reason="the home's quota has no room"),
        ],
    )
    assert not AuditEvent.objects.filter(kind=AuditKind.HOME_UPLOADED).exists()
    assert GatewayTicket.objects.get(pk=cut.pk).closed_at is not None
