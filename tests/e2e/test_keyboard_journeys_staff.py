"""The staff's journeys with the keyboard only, in English and Simplified Chinese, in Debian's
chromium in front of a real stack: an instructor imports a class list with a bad row (the
focus lands on the errors), imports the corrected one and books a weekly lab (check, then
confirm); an admin edits an alert rule (refused values first) and answers a quota request (no
decision first).

Only ``page.keyboard`` acts: Tab, Shift+Tab, Enter, Space, arrows and typing; the language is
chosen in the header the same way. Selectors only say where the focus is. The one dialog the
pages open, the system's file chooser, is answered by Playwright as the person would answer
it; the keyboard opens it (Space on the file field). Chromium's date and time fields take
their parts in the browser's locale (en-US here), whatever the page's language.
"""

from __future__ import annotations

from datetime import date, time, timedelta

import pytest
from django.utils import timezone, translation
from django.utils.translation import gettext

from people.models import Course
from scheduling.models import AlertRule, Booking, Quota
from scheduling.models.policy import QuotaRequest, QuotaRequestState
from scheduling.services.alert_changes import check_rule, do_save_rule
from scheduling.services.quota_requests import check_ask, do_ask

from .test_journeys import BAD_ROSTER, GOOD_ROSTER, LANGUAGES, start_simulated_agent

pytestmark = [pytest.mark.browser, pytest.mark.integration]

TAB_LIMIT = 150  # more stops than any page has: a focus that never gets there fails


def focus_matches(page, selector: str) -> bool:
    return page.evaluate(
        "(s) => !!document.activeElement && document.activeElement.matches(s)", selector
    )


def focus_describes(page) -> str:
    """Where the focus is, for a failure's message."""
    return page.evaluate(
        """() => { const e = document.activeElement;
                   return e ? e.outerHTML.slice(0, 200) : "nothing"; }"""
    )


def tab_to(page, selector: str, *, back: bool = False) -> None:
    """Press Tab (Shift+Tab with ``back``) until the focus is on ``selector``."""
    for _ in range(TAB_LIMIT):
        if focus_matches(page, selector):
            return
        page.keyboard.press("Shift+Tab" if back else "Tab")
    raise AssertionError(f"Tab never reached {selector} on {page.url}: {focus_describes(page)}")


def press_and_wait(page, key: str) -> None:
    """A key that sends a form or follows a link: wait for the next page."""
    with page.expect_navigation():
        page.keyboard.press(key)


def follow(page, selector: str) -> None:
    tab_to(page, selector)
    press_and_wait(page, "Enter")


def log_in_by_keyboard(page, username: str) -> None:
    page.goto("/login/")
    assert focus_matches(page, "input[name=username]"), focus_describes(page)
    page.keyboard.type(username)
    page.keyboard.press("Tab")
    page.keyboard.type(f"pw-{username}")
    press_and_wait(page, "Enter")
    assert page.url.endswith("/"), page.url


def choose_language_by_keyboard(page, language: str) -> None:
    """The header's language list: arrows to the language, then Switch."""
    tab_to(page, "#language-select")
    for _ in range(page.locator("#language-select option").count()):
        if page.evaluate("document.activeElement.value") == language:
            break
        page.keyboard.press("ArrowDown")
    tab_to(page, "#language-form button[type=submit]")
    press_and_wait(page, "Enter")
    assert page.get_attribute("html", "lang") == language


CHOOSER_PRESSES = 3  # Space on the file field, at most this many times
CHOOSER_WAIT_MS = 20_000  # for the chooser after each press


def choose_file(page, name: str, content: bytes) -> None:
    """Space on the focused file field opens the system's chooser; it is answered.

    On a loaded CI machine chromium once opened no chooser for a press within 60 s (the
    field focused, the page idle), where a person would press again: so does this, still
    by keyboard only, at most CHOOSER_PRESSES times."""
    choosers: list = []

    def opened(chooser) -> None:
        choosers.append(chooser)

    page.on("filechooser", opened)
    try:
        for _ in range(CHOOSER_PRESSES):
            assert focus_matches(page, "input[type=file]"), focus_describes(page)
            page.keyboard.press("Space")
            waited = 0
            while not choosers and waited < CHOOSER_WAIT_MS:
                page.wait_for_timeout(100)
                waited += 100
            if choosers:
                break
        assert choosers, f"no file chooser after {CHOOSER_PRESSES} presses of Space"
    finally:
        page.remove_listener("filechooser", opened)
    choosers[0].set_files(files=[{"name": name, "mimeType": "text/csv", "buffer": content}])


def type_date(page, day: date) -> None:
    """A date field of chromium in en-US takes month, day and year in turn."""
    page.keyboard.type(day.strftime("%m%d%Y"))


def type_time(page, at: time) -> None:
    """A time field of chromium in en-US takes hours, minutes and AM or PM in turn."""
    page.keyboard.type(at.strftime("%I%M") + ("A" if at.hour < 12 else "P"))


@pytest.fixture
def course(make_user, owner, profile):
    course = Course.objects.create(code="cs101", title="Deep learning lab", department="cs")
    course.instructors.add(make_user("ines"))
    course.students.add(owner)
    return course


@pytest.mark.parametrize("language", LANGUAGES)
def test_instructor_imports_a_roster_with_an_error_then_books_a_weekly_lab_by_keyboard(
    stack, course, profile, new_page, tmp_path, language
):
    start_simulated_agent(stack, tmp_path)
    page = new_page(locale="en-US")
    log_in_by_keyboard(page, "ines")
    choose_language_by_keyboard(page, language)
    follow(page, "header a[href='/courses/']")
    follow(page, "main a[href='/courses/cs101/']")

    # A class list with a bad e-mail on row 3: refused, and the focus is on its errors.
    tab_to(page, "#roster input[type=file]")
    choose_file(page, "class.csv", BAD_ROSTER)
    tab_to(page, "#roster button[name=action][value=import]")
    press_and_wait(page, "Enter")
    assert focus_matches(page, "#roster table.row-errors"), focus_describes(page)
    assert page.locator("table.row-errors tbody tr").count() == 1
    assert list(course.students.values_list("username", flat=True)) == ["ada"]
    # The next stop is the file field, described by its error.
    page.keyboard.press("Tab")
    assert focus_matches(page, "#roster input[type=file][aria-invalid=true]"), focus_describes(page)
    described = page.evaluate(
        """() => document.activeElement.getAttribute("aria-describedby").split(" ")
                 .map((id) => document.getElementById(id).textContent).join(" ")"""
    )
    with translation.override(language):
        refused = gettext(
            "The file has %(count)s error(s); nothing was imported. Fix them and try again."
        ) % {"count": 1}
    assert described.endswith(refused), described

    # The corrected list: imported.
    choose_file(page, "class.csv", GOOD_ROSTER)
    tab_to(page, "#roster button[name=action][value=import]")
    press_and_wait(page, "Enter")
    assert page.locator("table.row-errors").count() == 0
    assert set(course.students.values_list("username", flat=True)) == {
        "ada",
        "s2031",
        "s2032",
        "s2033",
    }

    # A weekly lab over three weeks, 10:00 to 12:00: the check, then confirm.
    follow(page, "main a[href='/courses/cs101/book/']")
    first = timezone.localdate() + timedelta(days=7)
    tab_to(page, "select[name=profile]")
    page.keyboard.press("ArrowDown")  # from the blank choice to the one desktop
    tab_to(page, "input[name=seats]")
    page.keyboard.type("2")
    page.keyboard.press("Tab")
    assert focus_matches(page, "input[name=repeat][value=once]"), focus_describes(page)
    page.keyboard.press("ArrowDown")
    assert focus_matches(page, "input[name=repeat][value=weekly]:checked")
    tab_to(page, "input[name=first_date]")
    type_date(page, first)
    tab_to(page, "input[name=last_date]")
    type_date(page, first + timedelta(days=14))
    tab_to(page, "input[name=starts]")
    type_time(page, time(10))
    tab_to(page, "input[name=ends]")
    type_time(page, time(12))
    tab_to(page, "button[name=step][value=check]")
    press_and_wait(page, "Enter")
    assert not page.locator("[aria-invalid=true]").count(), page.inner_text("main")
    rows = page.locator("table.check-table tbody tr")
    assert rows.count() == 3 and page.locator("tr.conflict").count() == 0, page.inner_text("main")
    assert not Booking.objects.filter(course=course).exists()
    if page.locator("input[name=accept_cautions]").count():
        tab_to(page, "input[name=accept_cautions]")
        page.keyboard.press("Space")
    tab_to(page, "button[name=step][value=confirm]")
    press_and_wait(page, "Enter")
    booked = Booking.objects.filter(course=course, cancelled_at=None).order_by("starts_at")
    assert booked.count() == 3
    assert [timezone.localtime(b.starts_at).date() for b in booked] == [
        first + timedelta(days=7 * week) for week in range(3)
    ]
    assert {(timezone.localtime(b.starts_at).hour, b.seats) for b in booked} == {(10, 2)}


@pytest.fixture
def asked(make_user, owner):
    """ada asks for 6 GPU-hours in cs101."""
    Quota.objects.create(scope="user", key="*", max_gpu_hours_week=40.0)
    course = Course.objects.create(code="cs101", title="Deep learning lab")
    course.instructors.add(make_user("ines"))
    course.students.add(owner)
    return do_ask(owner, check_ask(owner, "cs101", 6, "Final project training runs"))


@pytest.mark.parametrize("language", LANGUAGES)
def test_admin_edits_an_alert_rule_and_answers_a_quota_request_by_keyboard(
    stack, admin_user, asked, new_page, language
):
    rule = do_save_rule(
        admin_user,
        check_rule(
            admin_user,
            {"name": "Long queue", "metric": "queue_length", "scope": "pool", "warning": 10},
        ),
    )
    page = new_page(locale="en-US")
    log_in_by_keyboard(page, "root")
    choose_language_by_keyboard(page, language)
    follow(page, "header a[href='/console/']")
    follow(page, "nav.console-nav a[href='/console/alerts/']")
    follow(page, f"#alert-rules a[href='/console/alerts/rules/{rule.pk}/']")

    # Minutes that are not a number: refused, the focus on that field.
    tab_to(page, "input[name=sustained_minutes]")
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.type("soon")
    tab_to(page, "#rule-form button[type=submit]")
    press_and_wait(page, "Enter")
    assert focus_matches(page, "input[name=sustained_minutes][aria-invalid=true]"), focus_describes(
        page
    )
    # Corrected, with a critical level below the warning one: the service refuses that,
    # and the focus is on the critical level.
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.type("15")
    tab_to(page, "input[name=critical]", back=True)
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.type("5")
    tab_to(page, "#rule-form button[type=submit]")
    press_and_wait(page, "Enter")
    assert focus_matches(page, "input[name=critical][aria-invalid=true]"), focus_describes(page)
    assert page.locator("#rule-form [aria-invalid=true]").count() == 1
    rule.refresh_from_db()
    assert (rule.critical, rule.sustained_minutes) == (None, 0)

    # Corrected: a critical level of 20; the 15 minutes were kept.
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.type("20")
    tab_to(page, "#rule-form button[type=submit]")
    press_and_wait(page, "Enter")
    rule = AlertRule.objects.get(pk=rule.pk)
    assert (rule.warning, rule.critical, rule.sustained_minutes) == (10, 20, 15)

    # The quota request: sent with no decision, refused, the focus on the first choice.
    follow(page, "header a[href='/quota-requests/']")
    form = f"article[data-request-id='{asked.pk}'] form"
    tab_to(page, f"{form} input[name=hours]")
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.type("4")
    tab_to(page, f"{form} button[type=submit]")
    press_and_wait(page, "Enter")
    assert focus_matches(page, f"{form} input[name=decision][aria-invalid=true]"), focus_describes(
        page
    )
    assert QuotaRequest.objects.get(pk=asked.pk).state == QuotaRequestState.PENDING

    # Grant 4 of the 6 GPU-hours, with a word to the student.
    page.keyboard.press("Space")
    assert focus_matches(page, f"{form} input[name=decision][value=grant]:checked")
    tab_to(page, f"{form} textarea[name=answer]")
    page.keyboard.type("Four now; ask again next week.")
    tab_to(page, f"{form} button[type=submit]")
    press_and_wait(page, "Enter")
    answered = QuotaRequest.objects.get(pk=asked.pk)
    assert (answered.state, answered.hours) == (QuotaRequestState.GRANTED, 4.0)
    assert answered.answer == "Four now; ask again next week."
    assert page.locator("main .notice[role=status]").count() == 1
