"""Each role's main journey in a real browser, in English and in Simplified Chinese.

Debian's chromium (Playwright) in front of a real stack: daphne portal, Celery worker and,
where a journey needs desktops to start, a node agent with the SIMULATED runtime (no
Docker: these journeys are about the pages, not the desktops). The language is chosen with
the header's switcher, which also saves it as the person's preference. Every page a
journey reaches is checked with axe-core (no serious or critical violation) and saved as
``test-output/screenshots/<role>-<lang>-<step>-<width>.png``, the main pages at 390 px
(a phone) and 1280 px wide.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from guardian.shortcuts import assign_perm

from people.models import Course, Member
from scheduling.choices import Purpose
from scheduling.models import Booking, Session, Slice, set_default_profile
from scheduling.services.bookings import check_booking, do_create_booking
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit

from ..integration.stack import ROOT, wait_for, write_fleet
from .axe import check_axe, describe
from .conftest import log_in, wait_js

pytestmark = [pytest.mark.browser, pytest.mark.integration]

SHOTS = ROOT / "test-output" / "screenshots"
LANGUAGES = ["en", "zh-hans"]
PHONE, LAPTOP = {"width": 390, "height": 844}, {"width": 1280, "height": 900}
SLICES = 8  # the simulated node: 2 A100s of 4 MIG instances each

BAD_ROSTER = b"username,name,e-mail\ns2031,Lin Wei,lin@example.edu\ns2032,Bo Li,not-an-e-mail\n"
GOOD_ROSTER = (
    b"username,name,e-mail\n"
    b"s2031,Lin Wei,lin@example.edu\n"
    b"s2032,Bo Li,bo@example.edu\n"
    b"s2033,Chen Yu,chen@example.edu\n"
)


class Journey:
    """One person's walk: each step is checked with axe and photographed."""

    def __init__(self, page, role: str, language: str):
        self.page, self.role, self.language = page, role, language
        SHOTS.mkdir(parents=True, exist_ok=True)

    def step(self, name: str, *, phone: bool = False) -> None:
        for size in [PHONE, LAPTOP] if phone else [LAPTOP]:
            self.page.set_viewport_size(size)
            label = f"{self.role}-{self.language}-{name}-{size['width']}"
            self.page.screenshot(path=str(SHOTS / f"{label}.png"), full_page=True)
            violations = check_axe(self.page, f"journey-{label}")
            assert not violations, f"{label} ({self.page.url}):\n{describe(violations)}"

    def choose_language(self, username: str) -> None:
        """Pick the language in the header (saved as the person's preference)."""
        page = self.page
        page.select_option("#language-select", self.language)
        with page.expect_navigation():
            page.click("#language-form button[type=submit]")
        assert page.get_attribute("html", "lang") == self.language
        assert Member.objects.get(user__username=username).language == self.language

    def word(self, element_id: str, key: str) -> str:
        """A word a page passes to its script (in the page's language), from JSON."""
        return self.page.evaluate(
            f"JSON.parse(document.getElementById({element_id!r}).textContent).words[{key!r}]"
        )


def start_simulated_agent(stack, tmp_path) -> None:
    """A node agent with the simulated runtime and ``SLICES`` MIG slices, heartbeat on."""
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, SLICES // 2, gpus=2),
        runtime="simulated",
    )
    wait_for(
        lambda: (
            Slice.objects.filter(
                gpu__node__hostname=stack.node, gpu__node__last_heartbeat__isnull=False
            ).count()
            == SLICES
        ),
        60,
        "the simulated node's slices",
    )


@pytest.fixture
def course(make_user, owner, profile):
    """cs101: taught by ines, assisted by tom (the four TA grants), ada enrolled."""
    course = Course.objects.create(code="cs101", title="Deep learning lab", department="cs")
    set_default_profile(course, profile)
    course.instructors.add(make_user("ines"))
    course.students.add(owner)
    ta = make_user("tom")
    for perm in ("view_live_class", "manage_class_desktops", "answer_quota_requests"):
        assign_perm(f"portal.{perm}", ta, course)
    assign_perm("portal.view_course", ta, course)
    return course


@pytest.mark.parametrize("language", LANGUAGES)
def test_student_asks_for_a_desktop_watches_it_live_and_cancels(
    stack, owner, profile, new_page, language
):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    journey = Journey(page, "student", language)
    journey.choose_language("ada")

    # Home: the request form with the profiles offered and the quota left.
    assert page.is_visible("#quota-open") and page.is_visible("#quota-hours")
    assert profile.name in page.inner_text(f"label[for=profile-{profile.pk}]")
    journey.step("home", phone=True)

    # No node runs: the request waits in the queue, and the page listens for updates.
    page.check(f"#profile-{profile.pk}")
    page.check("#purpose-hobby")
    with page.expect_navigation():
        page.click("#submit-form button[type=submit]")
    match = re.search(r"/sessions/(\d+)/$", page.url)
    assert match, page.url
    session_id = int(match.group(1))
    assert page.get_attribute("#state", "data-state") == "QUEUED"
    live = journey.word("page-config", "live")
    wait_js(page, f"document.getElementById('live').textContent === {live!r}")
    assert page.is_visible("#cancel")
    journey.step("session", phone=True)

    # Cancel: back home with the notice; the request is no longer among the open ones.
    with page.expect_navigation():
        page.click("#cancel")
    assert page.url == f"{stack.url}/", page.url
    assert page.locator("main .notice[role=status]").count() == 1
    assert page.locator(f"#session-list [data-session-id='{session_id}']").count() == 0
    assert Session.objects.get(pk=session_id).state == "CANCELLED"
    journey.step("cancelled")


@pytest.mark.parametrize("language", LANGUAGES)
def test_ta_opens_the_courses_live_class(stack, course, owner, profile, new_page, language):
    # ada's coursework request, made before the browser starts.
    asked = do_submit(owner, check_submit(owner, profile.pk, Purpose.COURSEWORK, "cs101"))
    page = new_page()
    log_in(page, "tom", "pw-tom")
    journey = Journey(page, "ta", language)
    journey.choose_language("tom")

    page.goto("/courses/")
    link = page.locator("main a[href='/courses/cs101/']")
    assert link.count() == 1
    journey.step("courses", phone=True)

    with page.expect_navigation():
        link.click()
    assert page.is_visible("#live-class")
    assert page.get_attribute(f"#class-row-{asked.pk}", "data-state") == "QUEUED"
    assert "ada" in page.inner_text(f"#class-row-{asked.pk}")
    # A TA sees the class, not the roster, the TAs or the bookings.
    assert page.locator("#roster").count() == 0
    live = journey.word("class-live-data", "live")
    wait_js(page, f"document.getElementById('class-live').textContent === {live!r}")
    journey.step("live-class", phone=True)


@pytest.mark.parametrize("language", LANGUAGES)
def test_instructor_imports_the_roster_books_a_weekly_lab_and_starts_the_class(
    stack, course, make_user, profile, new_page, tmp_path, language
):
    start_simulated_agent(stack, tmp_path)
    # Another course holds every slice on the second date of the series.
    first = timezone.localdate() + timedelta(days=7)
    other = Course.objects.create(code="ee201", title="Signals", department="ee")
    teacher = make_user("olga")
    other.instructors.add(teacher)
    taken = timezone.make_aware(
        timezone.datetime.combine(first + timedelta(days=7), timezone.datetime.min.time())
    ) + timedelta(hours=10)
    do_create_booking(
        teacher,
        check_booking(teacher, "ee201", profile.pk, SLICES, taken, taken + timedelta(hours=2)),
    )

    page = new_page()
    log_in(page, "ines", "pw-ines")
    journey = Journey(page, "instructor", language)
    journey.choose_language("ines")
    page.goto("/courses/cs101/")
    journey.step("course", phone=True)

    # A class list with a bad e-mail: every row error is shown and nobody is imported.
    page.set_input_files(
        "#roster input[name=file]",
        files=[{"name": "class.csv", "mimeType": "text/csv", "buffer": BAD_ROSTER}],
    )
    with page.expect_navigation():
        page.click("#roster button[name=action][value=import]")
    errors = page.locator("table.row-errors tbody tr")
    assert errors.count() == 1
    assert errors.first.locator("td").first.inner_text() == "3"
    assert list(course.students.values_list("username", flat=True)) == ["ada"]
    journey.step("roster-errors")

    page.set_input_files(
        "#roster input[name=file]",
        files=[{"name": "class.csv", "mimeType": "text/csv", "buffer": GOOD_ROSTER}],
    )
    with page.expect_navigation():
        page.click("#roster button[name=action][value=import]")
    assert page.locator("table.row-errors").count() == 0
    enrolled = {"ada", "s2031", "s2032", "s2033"}
    assert set(course.students.values_list("username", flat=True)) == enrolled
    roster = page.inner_text("table.roster")
    assert all(name in roster for name in enrolled), roster
    journey.step("roster-imported")

    # A weekly lab over three weeks: the second date conflicts, with an alternative.
    page.goto("/courses/cs101/book/")
    page.select_option("select[name=profile]", str(profile.pk))
    page.fill("input[name=seats]", "2")
    page.check("input[name=repeat][value=weekly]")
    page.fill("input[name=first_date]", first.isoformat())
    page.fill("input[name=last_date]", (first + timedelta(days=14)).isoformat())
    page.fill("input[name=starts]", "10:00")
    page.fill("input[name=ends]", "12:00")
    journey.step("book", phone=True)
    with page.expect_navigation():
        page.click("button[name=step][value=check]")
    assert page.locator("table.check-table tbody tr").count() == 3
    conflicts = page.locator("table.check-table tbody tr.conflict")
    assert conflicts.count() == 1
    assert (
        conflicts.first.locator("time")
        .get_attribute("datetime")
        .startswith((first + timedelta(days=7)).isoformat())
    )
    assert conflicts.first.locator("ul.alternatives li").count() >= 1
    assert not Booking.objects.filter(course=course).exists()
    journey.step("booking-check", phone=True)
    with page.expect_navigation():
        page.click("button[name=step][value=confirm_rest]")
    assert Booking.objects.filter(course=course, cancelled_at=None).count() == 2

    # Start all: a desktop for each of the four students, live in the class table.
    page.goto("/courses/cs101/")
    with page.expect_navigation():
        page.click("#live-class form[action$='/start-all/'] button[type=submit]")
    sessions = Session.objects.filter(course=course)
    assert set(sessions.values_list("user__username", flat=True)) == enrolled
    live = journey.word("class-live-data", "live")
    wait_js(page, f"document.getElementById('class-live').textContent === {live!r}")
    wait_js(
        page,
        """(n) => {
             const rows = document.querySelectorAll("#class-rows tr[data-state]");
             return rows.length === n && [...rows].every(r => r.dataset.state === "RUNNING");
           }""",
        arg=len(enrolled),
        timeout=60_000,
    )
    journey.step("live-class", phone=True)
