"""The Files page (issue 27): a person's home folder while no desktop runs: list a folder,
upload a file into it, download a file, delete a file or folder.

The portal never reaches a node's disk: a listing or a deletion is a home task that the node
keeping the home carries out (``scheduling.services.home_files``). A view starts the task and
renders the page with its id; the page's script (``static/deskpool/files.js``) polls
``/files/tasks/<id>/`` (JSON: the task's fragment, rendered here in the reader's language and
time zone) until it ends. A deletion comes back to the folder's page with ``?task=<id>``: the
page waits for that task first, then lists the folder. Without JavaScript, the task's own
page refreshes itself until the task ends. An upload or a download is no task: the view
issues a ticket (``scheduling.services.home_transfers``) and the file's bytes go between the
browser and the node's gateway.
"""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.contrib.auth.models import User
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
)
from django.http.response import HttpResponseRedirectBase
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from nodeagent.home_files import portal_own
from nodeagent.protocol_files import HOME_LIST_MAX
from portal.kit.client_address import client_address_of
from portal.kit.confirm import confirm_first
from portal.kit.person import with_person
from scheduling.models import HomeTask, HomeTaskKind, HomeTaskState
from scheduling.services.gateway_tickets import gateway_url
from scheduling.services.home_files import (
    FilesPlace,
    FilesRefused,
    check_deletable,
    checked_path,
    files_place,
    home_full,
    megabytes,
    start_task,
    task_for,
)
from scheduling.services.home_transfers import check_home_transfer, do_issue_transfer_ticket

POLL_MS = 500


class HttpResponseSeeOther(HttpResponseRedirectBase):
    """303: to the gateway (another origin, http or https)."""

    status_code = 303
    allowed_schemes = ["http", "https"]  # how often the page asks how a task stands


def folder_url(path: str, task: HomeTask | None = None, hidden: bool = False) -> str:
    """The Files page of the folder ``path`` (and waiting for ``task``; with hidden files
    shown)."""
    query = {"path": path} if path else {}
    if task is not None:
        query["task"] = str(task.pk)
    if hidden:
        query["hidden"] = "1"
    return reverse("files") + (f"?{urlencode(query)}" if query else "")


def folder_of(task: HomeTask) -> str:
    """The folder a task's page comes back to: the listed one, else the path's parent."""
    return task.path if task.kind == HomeTaskKind.LIST else posixpath.dirname(task.path)


def _my_task(person: User, task_id: int) -> HomeTask:
    try:
        return task_for(person, task_id)
    except HomeTask.DoesNotExist:
        raise Http404(_("No such file task.")) from None


def crumbs(path: str, hidden: bool = False) -> list[dict[str, str]]:
    """The folders from the home down to ``path``: name and link."""
    out = [{"name": _("Home folder"), "url": folder_url("", hidden=hidden)}]
    parts = path.split("/") if path else []
    for i, name in enumerate(parts):
        out.append({"name": name, "url": folder_url("/".join(parts[: i + 1]), hidden=hidden)})
    return out


def is_hidden(name: str) -> bool:
    """A hidden file or folder: its name starts with "." (left out unless ``?hidden=1``)."""
    return name.startswith(".")


def wants_hidden(request: HttpRequest) -> bool:
    return request.GET.get("hidden", "") == "1"


def entries_of(task: HomeTask, hidden: bool = False) -> list[dict[str, Any]]:
    """A DONE listing's entries, folders first, with their paths and times as datetimes;
    hidden ones only when ``hidden``. The portal's own (``.deskpool``) get no Delete."""
    rows = []
    for entry in task.entries:
        if not hidden and is_hidden(entry["name"]):
            continue
        path = f"{task.path}/{entry['name']}" if task.path else entry["name"]
        rows.append(
            {
                **entry,
                "path": path,
                "modified": parse_datetime(entry["modified"]) if entry.get("modified") else None,
                "url": folder_url(path, hidden=hidden) if entry["kind"] == "folder" else "",
                "portal_own": portal_own(path),
            }
        )
    rows.sort(key=lambda row: (row["kind"] != "folder", row["name"].casefold()))
    return rows


def outcome(task: HomeTask) -> str:
    """What a finished deletion did, in a sentence."""
    name = posixpath.basename(task.path)
    if task.state == HomeTaskState.FAILED:
        return task.reason or _("The node could not do it.")
    if task.kind == HomeTaskKind.DELETE:
        return _("Deleted %(name)s.") % {"name": name}
    return ""


def waiting_words(task: HomeTask) -> str:
    """What the page says while the node works on the task."""
    host = task.node.hostname
    name = posixpath.basename(task.path)
    if task.kind == HomeTaskKind.DELETE:
        return _("Asking %(node)s to delete %(name)s…") % {"name": name, "node": host}
    return _("Asking %(node)s for your files…") % {"node": host}


def task_context(task: HomeTask, hidden: bool = False) -> dict[str, Any]:
    done = task.state == HomeTaskState.DONE
    listed = done and task.kind == HomeTaskKind.LIST
    entries = entries_of(task, hidden) if listed else []
    task_url = reverse("files-task", args=[task.pk])
    return {
        "task": task,
        "pending": task.state == HomeTaskState.PENDING,
        "failed": task.state == HomeTaskState.FAILED,
        "listing": task.kind == HomeTaskKind.LIST,
        "entries": entries,
        "hidden_count": len(task.entries or []) - len(entries) if listed else 0,
        "list_max": HOME_LIST_MAX,
        "waiting": waiting_words(task),
        "outcome": outcome(task) if task.kind != HomeTaskKind.LIST else "",
        "again_url": folder_url(folder_of(task), hidden=hidden),
        "task_url": task_url + ("?hidden=1" if hidden else ""),
    }


def render_task(request: HttpRequest, task: HomeTask, hidden: bool = False) -> str:
    return render_to_string("portal/files/_task.html", task_context(task, hidden), request=request)


def place_context(place: FilesPlace) -> dict[str, Any]:
    used = place.used_bytes
    return {
        "place": place,
        "used": megabytes(used) if used is not None else "",
        "quota": megabytes(place.quota_bytes) if place.quota_bytes else "",
        # The meter's figures in whole MB (its value must not pass its maximum).
        "meter_max": max(1, place.quota_bytes // 1024),
        "meter_value": min(used or 0, place.quota_bytes) // 1024,
        "full": home_full(used, place.quota_bytes),
    }


def files_page(
    request: HttpRequest,
    person: User,
    path: str,
    *,
    after: HomeTask | None = None,
    error: str = "",
    status: int = 200,
    hidden: bool = False,
) -> HttpResponse:
    """The page of the folder ``path``: where the home is, its quota, the upload form and,
    once ``after`` (a deletion) has ended, the folder's listing."""
    place = files_place(person)
    listing = None
    if after is not None and after.kind == HomeTaskKind.LIST:
        listing, after = after, None  # a listing's own page: show it
    # A deletion changes the folder: list it once it has ended (the page reloads then).
    wait_first = after is not None and after.state == HomeTaskState.PENDING
    if listing is None and place.node is not None and not error and not wait_first:
        try:
            listing = start_task(person, "list", path)
        except FilesRefused as refused:
            error, status = refused.message, 400
    context = {
        **place_context(place),
        "path": path,
        "crumbs": crumbs(path, hidden),
        "error": error,
        "hidden": hidden,
        "hidden_toggle_url": folder_url(path, hidden=not hidden),
        "after": task_context(after) if after is not None else None,
        "after_html": render_task(request, after) if after is not None else "",
        "listing": task_context(listing, hidden) if listing is not None else None,
        "listing_html": render_task(request, listing, hidden) if listing is not None else "",
        "config": {
            "poll_ms": POLL_MS,
            "after": reverse("files-task", args=[after.pk]) if after is not None else None,
            "listing": task_context(listing, hidden)["task_url"] if listing is not None else None,
            "reload": folder_url(path, after, hidden) if after is not None else None,
        },
    }
    response = render(request, "portal/files/page.html", context, status=status)
    sources = transfer_sources(person)
    if sources:  # allowed where the gateway is not the portal's origin: the upload goes
        # there, and the download form's 303 (form-action holds for a form's redirects too)
        update = {"connect-src": sources, "form-action": sources}
        response._csp_update = update  # type: ignore[attr-defined]
        response._csp_update_ro = update  # type: ignore[attr-defined]
    return response


def transfer_sources(person: User) -> list[str]:
    """The origin of the gateway a transfer goes to now, for the page's connect-src and
    form-action."""
    try:
        transfer = check_home_transfer(person, "download", "x")
    except FilesRefused:
        return []
    url = urlsplit(gateway_url(transfer.session, "upload"))
    return [f"{url.scheme}://{url.netloc}"]


@never_cache
@with_person
@require_GET
def files(request: HttpRequest, person: User) -> HttpResponse:
    """GET /files/?path=<folder>[&task=<id>][&hidden=1] (hidden=1: show hidden files)."""
    hidden = wants_hidden(request)
    try:
        path = checked_path(request.GET.get("path", ""))
    except FilesRefused as refused:
        return files_page(request, person, "", error=refused.message, status=400, hidden=hidden)
    after = None
    task_id = request.GET.get("task", "")
    if task_id:
        if not task_id.isdigit() or len(task_id) > 18:
            raise Http404(_("No such file task."))
        after = _my_task(person, int(task_id))
    return files_page(request, person, path, after=after, hidden=hidden)


@never_cache
@with_person
@require_GET
def task_view(request: HttpRequest, person: User, task_id: int) -> HttpResponse:
    """How a task stands: JSON for the page's script (``Accept: application/json``), else a
    page of its own that refreshes itself until the task ends (no JavaScript)."""
    task = _my_task(person, task_id)
    hidden = wants_hidden(request)
    context = task_context(task, hidden)
    html = render_task(request, task, hidden)
    if wants_json(request):
        return JsonResponse(task_json(task, html=html))
    back = folder_url(folder_of(task), hidden=hidden)
    return render(request, "portal/files/task.html", {**context, "task_html": html, "back": back})


def wants_json(request: HttpRequest) -> bool:
    """The desktop drawer's script asks for JSON; a form without it, for a page."""
    return "application/json" in request.headers.get("Accept", "")


def task_json(task: HomeTask, **extra: Any) -> dict[str, Any]:
    """How a task stands for a script: its state and what the page says of it now."""
    context = task_context(task)
    message = context["waiting"] if context["pending"] else context["outcome"]
    return {
        "id": task.pk,
        "kind": task.kind,
        "state": task.state,
        "message": message,
        "task": context["task_url"],
        **extra,
    }


def _refused(request: HttpRequest, person: User, folder: str, message: str) -> HttpResponse:
    """The folder's page again, saying why (400); to a script, the sentence as JSON."""
    if wants_json(request):
        return JsonResponse({"error": message}, status=400)
    try:
        folder = checked_path(folder)
    except FilesRefused:
        folder = ""
    return files_page(request, person, folder, error=message, status=400)


@with_person
@require_POST
def upload(request: HttpRequest, person: User) -> HttpResponse:
    """POST /files/upload/ (``path`` the folder, ``name`` and ``size`` of the file): for the
    page's script (JSON), 201 with a single-use ``ticket`` and the gateway's ``url``, where
    the script PUTs the file itself (``X-Deskpool-Ticket``), or 400 with ``error``. The bytes
    never come here; without JavaScript the page says uploads need it."""
    folder = request.POST.get("path", "")
    if not wants_json(request):
        return _refused(request, person, folder, _("Uploading needs JavaScript in your browser."))
    try:
        size = int(request.POST.get("size", "0"))
        transfer = check_home_transfer(
            person, "upload", folder, name=request.POST.get("name", ""), size=max(size, 0)
        )
    except ValueError:
        return _refused(request, person, folder, _("Choose a file to upload."))
    except FilesRefused as refused:
        return _refused(request, person, folder, refused.message)
    issued = do_issue_transfer_ticket(
        person, transfer, request.session.session_key or "", client_address_of(request)
    )
    name = posixpath.basename(transfer.path)
    return JsonResponse(
        {
            "ticket": issued.ticket,
            "url": issued.url,
            "sending": _("Sending %(name)s…") % {"name": name},
            "done": _("Uploaded %(name)s.") % {"name": name},
            "reload": folder_url(posixpath.dirname(transfer.path)),
        },
        status=201,
    )


@with_person
@require_POST
def download(request: HttpRequest, person: User) -> HttpResponse:
    """POST /files/download/ (``path`` the file): 303 to the gateway's URL with a single-use
    ticket, which answers the file as an attachment (no JavaScript needed)."""
    path = request.POST.get("path", "")
    try:
        transfer = check_home_transfer(person, "download", path)
    except FilesRefused as refused:
        return _refused(request, person, posixpath.dirname(path), refused.message)
    issued = do_issue_transfer_ticket(
        person, transfer, request.session.session_key or "", client_address_of(request)
    )
    return HttpResponseSeeOther(f"{issued.url}?{urlencode({'ticket': issued.ticket})}")


@with_person
@require_POST
def delete(request: HttpRequest, person: User) -> HttpResponse:
    """POST /files/delete/ (``path``, ``confirmed``): asks first without ``confirmed``."""
    path = request.POST.get("path", "")
    back = posixpath.dirname(path)
    try:
        check_deletable(checked_path(path))
    except FilesRefused as refused:
        return _refused(request, person, back, refused.message)
    name = posixpath.basename(path)
    if (ask := confirm_first(request, "delete_file", folder_url(back), name=name)) is not None:
        return ask
    try:
        task = start_task(person, "delete", path)
    except FilesRefused as refused:
        return _refused(request, person, back, refused.message)
    return redirect(folder_url(folder_of(task), task))
