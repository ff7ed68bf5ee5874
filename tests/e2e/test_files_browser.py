"""The Files page in a real browser (issues 27 and 34): a person lists their home, uploads a
file, sees it listed, downloads it (the same bytes, under its own name) and deletes it (asked
first), on a laptop (1280 px) and a phone (390 px), in English and in Simplified Chinese.

Uploads and downloads go straight between the browser and the home through the gateway of
the node where the person's desktop runs, never through the portal: so everything is real
(daphne portal, Celery worker, the Docker agent and its gateway, a deskpool/tiny desktop whose
home is a Docker volume). Listing and deleting are still home tasks, carried out by the same
agent. Each transfer the gateway reports done is audited once (home.uploaded,
home.downloaded). One desktop serves both languages, each in a browser context of its own.
Every state is checked with axe-core and saved as
``test-output/screenshots/files-<lang>-<step>-<width>.png``.
"""

from __future__ import annotations

import pytest

from people.models import Member
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, HomeTask, Session
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import TEST_IMAGE

from ..integration.stack import ROOT, wait_for, write_fleet
from .axe import check_axe, describe
from .conftest import log_in, open_menu, wait_js
from .test_desktop_drawer import desktop_file

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.docker]

SHOTS = ROOT / "test-output" / "screenshots"
WIDTHS = {"laptop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
WORDS = {
    "en": {"sending": "Sending {name}…", "deleted": "Deleted {name}."},
    "zh-hans": {"sending": "正在发送 {name}…", "deleted": "已删除 {name}。"},
}
NAMES = {"en": "notes {width}.txt", "zh-hans": "报告 {width}.txt"}


@pytest.fixture
def running_desktop(stack, owner, profile, docker_engine, require_image, tmp_path):
    """ada's desktop on deskpool/tiny, RUNNING on the stack's Docker agent; its id."""
    require_image(TEST_IMAGE)
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 1),
    )
    wait_for(lambda: Session.objects.get(pk=session.pk).state == "RUNNING", 120, "RUNNING")
    return session.pk


def listing_done(page) -> str:
    """Wait until the page's listing has ended; its text."""
    return wait_js(
        page,
        """() => {
          const task = document.querySelector("#files-listing .files-task");
          return task && task.dataset.state !== "PENDING" && task.textContent;
        }""",
        timeout=30_000,
    )


def check(page, label: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"files-{label}.png"), full_page=True)
    violations = check_axe(page, f"files-{label}")
    assert not violations, f"{label} ({page.url}):\n{describe(violations)}"


def entry(page, name: str):
    return page.locator("#files-listing .files-entry").filter(has_text=name)


def audited(kind: str, name: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=kind, data__path=name))


def test_list_upload_download_and_delete_a_file(
    stack, owner, running_desktop, docker_engine, new_page
):
    asked: list[str] = []
    for language in ("en", "zh-hans"):
        Member.objects.update_or_create(user=owner, defaults={"language": language})
        words = WORDS[language]
        page = new_page()  # a browser of its own: the language is the saved one
        log_in(page, "ada", "pw-ada")
        assert page.get_attribute("html", "lang") == language
        for width, size in WIDTHS.items():
            page.set_viewport_size(size)
            name = NAMES[language].format(width=size["width"])
            data = f"{language} {width}: 9:58, before class\n".encode() * 50
            label = f"{language}-{{}}-{size['width']}"

            # The navigation's Files entry; the page lists the home (asked of the node).
            page.goto("/")
            open_menu(page)
            with page.expect_navigation():
                page.locator("header nav a[href='/files/']").click()
            assert stack.node in page.inner_text("#files-place")
            listing_done(page)
            check(page, label.format("list"))

            # Upload: the page asks the portal for a ticket, sends the file to the gateway
            # (its progress in the status line), then lists the folder with the file in it.
            page.set_input_files(
                "#files-upload", files=[{"name": name, "mimeType": "text/plain", "buffer": data}]
            )
            with page.expect_navigation(timeout=30_000):
                page.click("#files-upload-form button[type=submit]")
            assert name in listing_done(page)
            assert desktop_file(docker_engine, running_desktop, name) == data  # in the desktop
            wait_for(lambda n=name: audited(AuditKind.HOME_UPLOADED, n), 15, "home.uploaded")
            check(page, label.format("uploaded"))

            # Download: the form's 303 to the gateway; the same bytes, under the file's name.
            with page.expect_download() as saved:
                entry(page, name).locator("form[action='/files/download/'] button").click()
            download = saved.value
            assert download.suggested_filename == name
            with open(download.path(), "rb") as f:
                assert f.read() == data
            wait_for(lambda n=name: audited(AuditKind.HOME_DOWNLOADED, n), 15, "a download")
            listing_done(page)

            # Delete: asked first (dismissed: nothing happens), then accepted.
            asked.clear()
            page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
            entry(page, name).locator("form[action='/files/delete/'] button").click()
            assert page.evaluate("fetch(location.href).then((r) => r.ok)")
            assert len(asked) == 1 and name in asked[0]
            assert not HomeTask.objects.filter(user=owner, kind="delete", path=name).exists()
            page.once("dialog", lambda dialog: dialog.accept())
            with page.expect_navigation():
                entry(page, name).locator("form[action='/files/delete/'] button").click()
            deleted = words["deleted"].format(name=name)
            wait_js(page, "(text) => document.body.textContent.includes(text)", deleted,
                    timeout=30_000)  # fmt: skip
            assert name not in listing_done(page).replace(deleted, "")
            check(page, label.format("deleted"))

    # Each transfer the gateway reported done became one audit row, with its bytes.
    for kind in (AuditKind.HOME_UPLOADED, AuditKind.HOME_DOWNLOADED):
        rows = AuditEvent.objects.filter(kind=kind)
        assert rows.count() == 4, (kind, list(rows.values_list("data", flat=True)))
        assert {row.actor for row in rows} == {"user:ada"}
        assert {row.session_id for row in rows} == {running_desktop}
