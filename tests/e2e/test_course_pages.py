"""The instructor's course page in a real browser: no axe-core violations on a phone and a
laptop, Start all from the keyboard, and the live class updating a row without a reload."""

from __future__ import annotations

import pytest

from people.models import Course
from scheduling.models import Session, set_default_profile
from scheduling.services.api_tokens import issue_token

from .axe import check_axe, describe
from .conftest import log_in, wait_js

WIDTHS = {"phone": (390, 844), "laptop": (1280, 900)}


@pytest.fixture
def course(stack, make_user, profile):
    teacher = make_user("prof")
    course = Course.objects.create(code="cs101", title="Intro")
    set_default_profile(course, profile)
    course.instructors.add(teacher)
    course.students.add(*(make_user(f"s{i}") for i in range(3)))
    return course


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_the_course_pages_pass_axe(course, new_page, width):
    page = new_page()
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    log_in(page, "prof", "pw-prof")
    for name, path in (("index", "/courses/"), ("detail", "/courses/cs101/")):
        assert page.goto(path).status == 200
        violations = check_axe(page, f"course-{name}-{width}")
        assert not violations, describe(violations)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, (path, overflow)


@pytest.mark.browser
@pytest.mark.integration
def test_start_all_from_the_keyboard_then_the_live_class_follows_stop_all(course, new_page):
    page = new_page()
    log_in(page, "prof", "pw-prof")
    page.goto("/courses/cs101/")
    wait_js(page, "document.getElementById('class-live').textContent !== ''")
    assert page.locator("#class-rows tr").count() == 0

    with page.expect_navigation():
        page.focus("form[action$='/start-all/'] button")
        page.keyboard.press("Enter")
    assert page.locator("#class-rows tr").count() == 3
    assert Session.objects.filter(course=course).count() == 3

    # Stopped elsewhere (through the API, in another browser): the rows leave, no reload.
    wait_js(page, "document.getElementById('class-live').textContent !== ''")
    page.evaluate("window.__notReloaded = true")
    _, token = issue_token(course.instructors.get())
    elsewhere = new_page().request.post(
        "/api/v1/courses/cs101/stop-all/", headers={"Authorization": f"Token {token}"}
    )
    assert elsewhere.json() == {"stopped": 3}
    wait_js(page, "document.querySelectorAll('#class-rows tr').length === 0")
    assert page.evaluate("window.__notReloaded") is True
    assert page.is_visible("#class-empty")
