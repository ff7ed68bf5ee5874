"""Teachers answer quota requests in a real browser, in English and in Simplified Chinese:
a TA sees how many wait (the header's Courses link, the course page), chooses Grant and the
student's weekly limit rises; the instructor chooses Refuse. Debian's chromium (Playwright)
in front of the real stack (daphne portal, Celery worker); every page is checked with axe.
"""

from __future__ import annotations

import pytest
from guardian.shortcuts import assign_perm

from people.models import Course
from scheduling.models import Quota
from scheduling.models.policy import QuotaRequest, QuotaRequestState
from scheduling.services.quota_requests import check_ask, do_ask
from scheduling.services.quota_view import quota_left

from .conftest import log_in
from .test_journeys import LANGUAGES, Journey

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture
def asked(stack, make_user, owner, stranger):
    """cs101: taught by ines, tom its TA allowed to answer; ada asks for 6 GPU-hours, ben
    for 3, over a weekly limit of 40."""
    Quota.objects.create(scope="user", key="*", max_gpu_hours_week=40.0)
    course = Course.objects.create(code="cs101", title="Deep learning lab")
    course.instructors.add(make_user("ines"))
    course.students.add(owner, stranger)
    ta = make_user("tom")
    assign_perm("portal.answer_quota_requests", ta, course)
    return (
        do_ask(owner, check_ask(owner, "cs101", 6, "Final project training runs")),
        do_ask(stranger, check_ask(stranger, "cs101", 3, "A second run")),
    )


def answer(journey: Journey, request: QuotaRequest, decision: str, **fields: str) -> None:
    """Tick Grant or Refuse on the request's form (its label, in the page's language), fill
    the other fields, send, and land back on the page with the notice."""
    page = journey.page
    form = page.locator(f"article[data-request-id='{request.pk}'] form")
    form.locator(f"input[type=radio][value={decision}]").check()
    for name, value in fields.items():
        form.locator(f"[name={name}]").fill(value)
    with page.expect_navigation():
        form.locator("button[type=submit]").click()
    assert page.locator("main .notice[role=status]").count() == 1, page.content()


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_ta_grants_and_the_instructor_refuses_from_the_page(
    asked, owner, stranger, new_page, language
):
    ada_asks, ben_asks = asked
    assert quota_left(owner).max_gpu_hours_week == 40.0

    # The TA sees two requests waiting, from the header and from the course page.
    page = new_page()
    log_in(page, "tom", "pw-tom")
    journey = Journey(page, "ta-quota", language)
    journey.choose_language("tom")
    assert page.inner_text("#nav-quota-waiting").startswith("2")
    page.goto("/courses/cs101/")
    assert page.inner_text("#course-quota-waiting .count") == "2"
    with page.expect_navigation():
        page.click("#course-quota-waiting a")
    grant = page.locator(f"article[data-request-id='{ada_asks.pk}'] label").first
    assert grant.locator("input[type=radio]").get_attribute("value") == "grant"
    journey.step("answer", phone=True)

    # Grant 4 of the 6 GPU-hours: ada's weekly limit rises by 4.
    answer(journey, ada_asks, "grant", hours="4", answer="Go ahead")
    ada_asks.refresh_from_db()
    assert (ada_asks.state, ada_asks.hours) == (QuotaRequestState.GRANTED, 4.0)
    assert quota_left(owner).max_gpu_hours_week == 44.0
    assert page.inner_text("#nav-quota-waiting").startswith("1")

    # The instructor refuses ben's: nothing waits any more, ben's limit stays.
    page = new_page()
    log_in(page, "ines", "pw-ines")
    journey = Journey(page, "instructor-quota", language)
    journey.choose_language("ines")
    page.goto("/quota-requests/")
    answer(journey, ben_asks, "refuse", answer="Not this week")
    ben_asks.refresh_from_db()
    assert (ben_asks.state, ben_asks.answer) == (QuotaRequestState.REFUSED, "Not this week")
    assert quota_left(stranger).max_gpu_hours_week == 40.0
    assert page.locator("#nav-quota-waiting").count() == 0
    assert page.is_visible("#nothing-to-answer")
    journey.step("answered")
