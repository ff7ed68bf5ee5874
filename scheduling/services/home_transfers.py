"""Home files up and down through the node's gateway (issue 34): the portal decides, the
gateway carries the bytes straight between the browser and the home, never through the
portal or its database (docs/lifecycle.md "Home files").

A transfer goes through a running desktop of the person's (its node keeps the home and its
gateway reaches it): :func:`check_home_transfer` picks it, checks the path (and for an
upload the name and the room the quota leaves, as last measured), and
:func:`do_issue_transfer_ticket` signs a single-use ticket bound to that one file, with the
home's quota for the gateway to hold the upload to. The gateway reports the transfer; the
audit row (``home.uploaded``, ``home.downloaded``) is written when it went through whole
(:mod:`.gateway_events`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.utils.translation import gettext as _

from nodeagent.protocol_files import home_path

from ..choices import OPENABLE_STATES
from ..models import HomeUsage, Session
from . import ServiceError
from .gateway_tickets import IssuedTicket, check_gateway_open, do_issue_ticket
from .home_files import FilesRefused, checked_path, megabytes, quota_bytes_of


@dataclass(frozen=True)
class HomeTransfer:
    session: Session  # the desktop whose node's gateway carries it
    purpose: str  # upload or download
    path: str  # the file in the home
    quota: int  # upload: the home's quota in bytes (0: none)


def check_home_transfer(
    user: User, purpose: str, path: str, *, name: str = "", size: int = 0
) -> HomeTransfer:
    """What ``user`` may move now: ``download`` the file ``path``, or ``upload`` a file
    ``name`` of ``size`` bytes into the folder ``path``; else FilesRefused saying why."""
    if purpose not in ("upload", "download"):
        raise FilesRefused(_("Choose an upload or a download."))
    path = checked_path(path)
    if purpose == "upload":
        path = checked_path(posixpath.join(path, upload_name(name)) if path else upload_name(name))
    elif not path:
        raise FilesRefused(_("Choose a file in your home."))
    desktop = (
        Session.objects.filter(user=user, state__in=OPENABLE_STATES, node__isnull=False)
        .order_by("-pk")
        .first()
    )
    if desktop is None:
        raise FilesRefused(
            _(
                "Uploads and downloads go through your running desktop's node. Start a "
                "desktop, then try again."
            )
        )
    return check_transfer_on(user, desktop.pk, purpose, path, size=size)


def check_transfer_on(
    user: User, session_id: int, purpose: str, path: str, *, size: int = 0
) -> HomeTransfer:
    """A transfer of the file ``path`` through the gateway of the desktop ``session_id``
    (which ``user`` may open); the quota is its owner's. FilesRefused if not."""
    path = checked_path(path)
    if not path:
        raise FilesRefused(_("Choose a file in your home."))
    try:
        session = check_gateway_open(user, session_id, purpose)
    except ServiceError as refused:
        raise FilesRefused(refused.message) from refused
    owner = session.user
    quota = quota_bytes_of(owner) if purpose == "upload" else 0
    if purpose == "upload" and quota:
        usage = HomeUsage.objects.filter(user=owner).first()
        used = usage.used_bytes if usage is not None else 0
        if used + size > quota:
            raise FilesRefused(
                _(
                    "Your home folder has no room for this file: %(used)s of %(quota)s used, "
                    "the file is %(size)s. Delete files, then upload again."
                )
                % {"used": megabytes(used), "quota": megabytes(quota), "size": megabytes(size)}
            )
    return HomeTransfer(session, purpose, path, quota)


def upload_name(name: str) -> str:
    """The name an uploaded file is kept under, or FilesRefused."""
    name = posixpath.basename((name or "").replace("\\", "/"))
    if not name or name in (".", ".."):
        raise FilesRefused(_("Choose a file with a name."))
    try:
        return home_path(name)
    except ValueError:
        raise FilesRefused(
            _(
                "This file's name cannot be kept in your home (control characters, or over "
                "255 bytes). Rename the file, then upload it again."
            )
        ) from None


def do_issue_transfer_ticket(
    user: User, transfer: HomeTransfer, login_session: str, address: str | None
) -> IssuedTicket:
    """The ticket for the transfer :func:`check_home_transfer` allowed."""
    return do_issue_ticket(
        user,
        transfer.session,
        transfer.purpose,
        login_session,
        address,
        path=transfer.path,
        quota=transfer.quota,
    )
