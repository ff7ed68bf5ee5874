"""A refused form puts the focus on its first error (static/deskpool/form_errors.js), in
English and Simplified Chinese, in Debian's chromium in front of a real stack: the sign-in
(a summary above the form, the fields described by it), the account's time zone (one field
of a hand-written form) and the booking form (Django's as_field_group: the first of several
refused fields). The focused field is refused (aria-invalid) and described by its error, in
the page's language.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation
from django.utils.translation import gettext

from people.models import Course, validate_time_zone

from .conftest import log_in
from .test_journeys import LANGUAGES, Journey

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def focused_error(page) -> dict:
    """The focused element: its name, whether it is refused, and the text it is described by."""
    return page.evaluate(
        """() => {
             const e = document.activeElement;
             const ids = (e.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
             return {
               name: e.getAttribute("name"),
               invalid: e.getAttribute("aria-invalid"),
               described: ids.map((id) => document.getElementById(id).textContent.trim()),
             };
           }"""
    )


def in_language(language: str, words) -> str:
    with translation.override(language):
        return str(words())


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_refused_sign_in_focuses_the_username_described_by_the_error(
    stack, owner, new_page, language
):
    page = new_page()
    page.goto("/login/")
    page.select_option("#language-select", language)
    with page.expect_navigation():
        page.click("#language-form button[type=submit]")
    assert page.get_attribute("html", "lang") == language
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "not-her-password")
    with page.expect_navigation():
        page.click("main form button[type=submit]")

    error = in_language(
        language, lambda: gettext("That username and password did not match. Try again.")
    )
    assert page.inner_text("#login-error") == error
    assert focused_error(page) == {"name": "username", "invalid": "true", "described": [error]}


def time_zone_error(language: str, name: str) -> str:
    with translation.override(language):
        try:
            validate_time_zone(name)
        except ValidationError as refused:
            return " ".join(refused.messages)
    raise AssertionError(f"{name} was taken for a time zone")


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_refused_time_zone_focuses_its_field_described_by_the_error_and_the_hint(
    stack, owner, new_page, language
):
    page = new_page()
    log_in(page, "ada", "pw-ada")
    Journey(page, "student", language).choose_language("ada")
    page.goto("/account/")
    page.fill("input[name=time_zone]", "Mars/Olympus")
    with page.expect_navigation():
        page.click("#preferences-form button[type=submit]")

    focus = focused_error(page)
    assert (focus["name"], focus["invalid"]) == ("time_zone", "true"), focus
    assert focus["described"][0] == time_zone_error(language, "Mars/Olympus")
    assert len(focus["described"]) == 2  # then the hint


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_refused_booking_focuses_the_first_of_its_refused_fields(
    stack, make_user, profile, new_page, language
):
    Course.objects.create(code="cs101", title="Intro").instructors.add(make_user("ines"))
    page = new_page()
    log_in(page, "ines", "pw-ines")
    Journey(page, "instructor", language).choose_language("ines")
    page.goto("/courses/cs101/book/")
    with page.expect_navigation():
        page.click("button[name=step][value=check]")  # nothing chosen, nothing filled

    refused = page.evaluate(
        "[...document.querySelectorAll('main form [aria-invalid=true]')].map((e) => e.name)"
    )
    assert refused[:2] == ["profile", "seats"], refused
    required = in_language(language, lambda: gettext("This field is required."))
    assert focused_error(page) == {"name": "profile", "invalid": "true", "described": [required]}


def test_a_refused_form_folded_in_a_closed_details_opens_with_the_focus_on_its_error(
    stack, make_user, owner, new_page
):
    course = Course.objects.create(code="cs101", title="Intro")
    course.instructors.add(make_user("ines"))
    course.students.add(owner)
    page = new_page()
    log_in(page, "ines", "pw-ines")
    page.goto("/courses/cs101/")
    page.click("#roster details summary")
    page.fill("#roster details input[name=identity]", "ada")  # already enrolled
    with page.expect_navigation():
        page.click("#roster details button[type=submit]")

    assert page.evaluate("document.querySelector('#roster details').open")
    focus = focused_error(page)
    assert (focus["name"], focus["invalid"]) == ("identity", "true"), focus
    enrolled = in_language("en", lambda: gettext("%(name)s is already enrolled.") % {"name": "ada"})
    assert focus["described"] == [enrolled]


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_refused_desktop_request_focuses_the_course_described_by_the_error(
    stack, owner, profile, new_page, language
):
    for code in ("cs101", "ee201"):
        Course.objects.create(code=code, title=code).students.add(owner)
    page = new_page()
    log_in(page, "ada", "pw-ada")
    Journey(page, "student", language).choose_language("ada")
    page.check("#purpose-coursework")  # and no course chosen of her two
    assert page.input_value("#id_course") == ""
    with page.expect_navigation():
        page.click("#submit-form button[type=submit]")

    refused = in_language(
        language, lambda: gettext("Coursework requests name the course they are for.")
    )
    assert focused_error(page) == {"name": "course", "invalid": "true", "described": [refused]}
