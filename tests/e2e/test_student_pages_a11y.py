"""The student's pages in a real browser: no serious or critical axe-core violations, on a
phone (390 px wide) and on a laptop, and the request form usable from the keyboard."""

from __future__ import annotations

import pytest

from .axe import check_axe, describe
from .conftest import log_in

WIDTHS = {"phone": (390, 844), "laptop": (1280, 900)}


@pytest.fixture
def adas_queued_session(stack, owner, profile):
    """A queued hobby request of ada's, made before the browser starts."""
    from scheduling.services.sessions import check_submit, do_submit

    return do_submit(owner, check_submit(owner, profile.pk, "hobby", None))


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_the_student_pages_pass_axe(adas_queued_session, new_page, width):
    page = new_page()
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    log_in(page, "ada", "pw-ada")
    session_id = adas_queued_session.pk
    for name, path in (
        ("home", "/"),
        ("session", f"/sessions/{session_id}/"),
        ("history", "/history/"),
    ):
        assert page.goto(path).status == 200
        violations = check_axe(page, f"student-{name}-{width}")
        assert not violations, describe(violations)
        # Nothing wider than the screen: no sideways scrolling on a phone.
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, (path, overflow)


@pytest.mark.browser
@pytest.mark.integration
def test_a_refused_request_is_announced_next_to_its_field(stack, owner, profile, new_page):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    # Keyboard only: the course list, then submit coursework without a course.
    page.focus(f"#profile-{profile.pk}")
    page.keyboard.press("Space")
    page.evaluate("document.getElementById('purpose-hobby').checked = false")
    with page.expect_navigation():
        page.focus("#submit-form button[type=submit]")
        page.keyboard.press("Enter")
    # Hobby unticked by hand: the form names the purpose as the field at fault.
    described = page.get_attribute("input[name=purpose]", "aria-describedby") or ""
    assert "purpose-error" in described
    assert page.is_visible("#purpose-error")
    violations = check_axe(page, "student-home-refused")
    assert not violations, describe(violations)
