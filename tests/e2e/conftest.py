"""Browser fixtures for the end-to-end tests: Debian's chromium driven by Playwright.

The real stack (daphne portal, Celery worker, node agent) comes from the integration
fixtures; these tests only add a browser in front of it. No browser is ever downloaded.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.integration.conftest import (  # noqa: F401 - fixtures and the report hook
    docker_engine,
    pytest_runtest_makereport,
    require_image,
    stack,
    stack_options,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture
def stackless_page():
    """A page of Debian's chromium with no stack behind it (the test serves what it loads)."""
    if not CHROMIUM.exists():
        pytest.skip(f"the browser tests drive Debian's chromium: {CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            context = chromium.new_context()
            context.set_default_timeout(15_000)
            yield context.new_page()
        finally:
            chromium.close()


@pytest.fixture
def browser(stack, monkeypatch):  # noqa: F811 - the imported fixture
    """A headless chromium for one test, started after the stack (and its environment)."""
    if not CHROMIUM.exists():
        pytest.skip(f"the browser tests drive Debian's chromium: {CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API keeps an event loop running in this thread; the test's own
    # ORM calls are still plain synchronous ones. Set only now, so the stack's processes
    # (their environment was copied when the stack was made) keep Django's async checks.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def new_page(browser, stack):  # noqa: F811 - the imported fixture
    """Make a page in a fresh browser context (its own cookies) on the stack's portal.

    What the pages log to their console, and their uncaught errors, are printed at the
    end, so that a failing test shows them.
    """
    contexts = []
    console: list[str] = []

    def make(**options):
        """``options``: more of the context's (``has_touch=True``, another viewport)."""
        options = {"viewport": {"width": 1280, "height": 900}, **options}
        context = browser.new_context(base_url=stack.url, **options)
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on("console", lambda m: console.append(f"[{m.type}] {m.text} ({page.url})"))
        page.on("pageerror", lambda e: console.append(f"[pageerror] {e} ({page.url})"))
        return page

    yield make
    for context in contexts:
        context.close()
    print("--- browser console ---", *console, sep="\n")
    # Every page runs under the portal's real Content-Security-Policy: nothing it refused.
    refused = [line for line in console if "Content Security Policy" in line]
    assert not refused, f"the Content-Security-Policy refused: {refused}"


def wait_js(page, expression: str, arg=None, timeout: float | None = None, polling: float = 100):
    """Wait until ``expression`` (a JS expression or function, called with ``arg``) is truthy,
    and return its value; like ``page.wait_for_function``, which evaluates its predicate with
    eval() inside the page, something the portal's Content-Security-Policy (script-src 'self')
    refuses. ``page.evaluate`` is a DevTools evaluation that the policy does not govern, so the
    pages run under their real policy here. An exception thrown by the predicate fails at once.
    """
    deadline = time.monotonic() + (timeout if timeout is not None else 15_000) / 1000
    while True:
        try:
            value = page.evaluate(expression, arg)
        except PlaywrightError as error:
            if "Execution context was destroyed" not in str(error):
                raise
            value = None  # the page navigated: ask the new one
        if value:
            return value
        if time.monotonic() > deadline:
            raise PlaywrightTimeout(f"timed out waiting for {expression.strip()[:120]!r}")
        page.wait_for_timeout(polling)


def open_menu(page) -> None:
    """On a phone the header's navigation is folded behind the menu button: open it."""
    toggle = page.locator("#menu-toggle")
    if toggle.is_visible() and toggle.get_attribute("aria-expanded") != "true":
        toggle.click()


def log_in(page, username: str, password: str) -> None:
    """Log in through the real login form and land on the home page."""
    page.goto("/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("main form button[type=submit]")
    # text_content, not inner_text: on a phone the navigation is folded behind the menu button
    assert page.locator("header nav").text_content().strip().startswith(username), page.content()
