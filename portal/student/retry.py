"""The failed session's "Try again": the same request, submitted anew (``do_retry``)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.kit.person import with_person
from scheduling.models import Session
from scheduling.services import ServiceError
from scheduling.services.retry import do_retry


@with_person
@require_POST
def retry_session(request: HttpRequest, user: User, session_id: int) -> HttpResponse:
    session = Session.objects.filter(pk=session_id, user=user).select_related("course").first()
    if session is None:
        raise Http404(_("No such session."))
    try:
        again = do_retry(user, session)
    except ServiceError as error:
        messages.warning(request, error.message)
        return redirect("session-page", session_id=session.pk)
    messages.success(request, _("Asked again as request #%(id)s.") % {"id": again.pk})
    return redirect("session-page", session_id=again.pk)
