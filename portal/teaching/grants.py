"""Pages for thesis grants (advisors, admins, students) and quota requests (students ask,
teachers answer). Thin: forms call the ``check_*`` services, views call ``do_*``."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from people.models import ThesisGrant
from portal.kit.person import signed_in, with_person
from portal.teaching.grant_forms import QuotaAnswerForm, QuotaAskForm, ThesisGrantForm
from scheduling.models.policy import QuotaRequest
from scheduling.services import Conflict, NotFound, ServiceError
from scheduling.services.eligibility import Forbidden, active_thesis_grant, eligible_courses
from scheduling.services.grants import check_revoke, do_grant, do_revoke, may_grant, may_revoke
from scheduling.services.quota_requests import (
    answerable_courses,
    check_answerer,
    do_answer,
    do_ask,
    pending_to_answer,
)
from scheduling.services.quota_view import quota_left


def _raise_for(error: ServiceError) -> None:
    """Refusals about who asks become 404 / 403; the rest are the caller's to show."""
    if isinstance(error, NotFound):
        raise Http404(error.message)
    if isinstance(error, Forbidden):
        raise PermissionDenied(error.message)


@with_person
@require_http_methods(["GET", "POST"])
def thesis_grants(request: HttpRequest, person: User) -> HttpResponse:
    """Advisors and admins: the grants they gave, a form to grant, Revoke buttons.
    Students: their own grants, in force and past."""
    grantor = may_grant(person)
    form = ThesisGrantForm(person, request.POST or None) if grantor else None
    status = 200
    if request.method == "POST":
        if form is None:
            raise PermissionDenied(_("Only faculty members and admins grant thesis status."))
        if form.is_valid() and form.grant is not None:
            grant = do_grant(person, form.grant)
            messages.success(
                request,
                _("%(student)s has thesis status until %(until)s.")
                % {"student": grant.student.get_username(), "until": grant.until.isoformat()},
            )
            return redirect("thesis-grants")
        status = 400
    visible = ThesisGrant.objects.visible_to(person).select_related(
        "student", "granted_by", "revoked_by"
    )
    given = visible if person.is_staff else visible.filter(granted_by=person)
    context = {
        "grantor": grantor,
        "form": form,
        "given": [(g, may_revoke(person, g) and g.revoked_at is None) for g in given],
        "mine": visible.filter(student=person),
        "active": active_thesis_grant(person),
        "today": timezone.localdate(),
    }
    return render(request, "grants/thesis.html", context, status=status)


@with_person
@require_POST
def revoke_grant(request: HttpRequest, person: User, grant_id: int) -> HttpResponse:
    try:
        grant = check_revoke(person, grant_id)
        do_revoke(person, grant)
    except Conflict as error:
        messages.error(request, error.message)
        return redirect("thesis-grants")
    except ServiceError as error:
        _raise_for(error)
        raise
    messages.success(
        request,
        _("The grant of %(student)s is revoked; their waiting thesis requests are now hobby ones.")
        % {"student": grant.student.get_username()},
    )
    return redirect("thesis-grants")


def _quota_page(
    request: HttpRequest,
    *,
    ask_form: QuotaAskForm | None = None,
    answer_form: QuotaAnswerForm | None = None,
    status: int = 200,
) -> HttpResponse:
    person = signed_in(request.user)
    courses = answerable_courses(person)
    course_filter = request.GET.get("course", "")
    pending = (
        pending_to_answer(person)  # never one's own: nobody answers their own request
        .select_related("student", "course")
        .order_by("created_at", "pk")
    )
    if course_filter:
        pending = pending.filter(course__code=course_filter)
    to_answer = [
        (
            r,
            answer_form
            if answer_form is not None and answer_form.request_id == r.pk
            else QuotaAnswerForm(person, r.pk, initial={"hours": r.hours}),
        )
        for r in pending
    ]
    mine = QuotaRequest.objects.filter(student=person).select_related("course", "answered_by")
    enrolled = eligible_courses(person).exists()
    if ask_form is None and enrolled:
        ask_form = QuotaAskForm(person)
    context = {
        "mine": mine,
        "ask_form": ask_form,
        "quota": quota_left(person),
        "teaching": courses.exists(),
        "courses": courses,
        "course_filter": course_filter,
        "to_answer": to_answer,
        "config": {
            "words": {
                "live": _("Live: answers appear here as they come."),
                "reconnecting": _("Reconnecting…"),
                "stopped": _("Not live: sign in again, then reload the page."),
            },
        },
    }
    return render(request, "grants/quota_requests.html", context, status=status)


@with_person
@require_http_methods(["GET", "POST"])
def quota_requests(request: HttpRequest, person: User) -> HttpResponse:
    """Students: their requests (live) and a form to ask. Teachers, TAs allowed to answer,
    and admins: the pending requests of their courses (``?course=<code>``) to answer."""
    if request.method == "GET":
        return _quota_page(request)
    form = QuotaAskForm(person, request.POST)
    if form.is_valid() and form.ask is not None:
        do_ask(person, form.ask)
        messages.success(request, _("Your request is sent to the course's teachers."))
        return redirect("quota-requests")
    return _quota_page(request, ask_form=form, status=400)


@with_person
@require_POST
def answer_quota_request(request: HttpRequest, person: User, request_id: int) -> HttpResponse:
    try:
        check_answerer(person, request_id)
    except Forbidden as error:  # one's own request, or a course one does not answer for
        messages.error(request, error.message)
        return _quota_page(request, status=403)
    except ServiceError as error:
        _raise_for(error)
        raise
    form = QuotaAnswerForm(person, request_id, request.POST)
    if form.is_valid() and form.reply is not None:
        try:
            answered = do_answer(person, form.reply)
        except Conflict as error:
            messages.error(request, error.message)
        else:
            messages.success(
                request,
                _("Answered: %(state)s.") % {"state": answered.get_state_display()},
            )
        return redirect(reverse("quota-requests") + _course_query(request))
    return _quota_page(request, answer_form=form, status=400)


def _course_query(request: HttpRequest) -> str:
    code = request.GET.get("course", "")
    return "?" + urlencode({"course": code}) if code else ""
