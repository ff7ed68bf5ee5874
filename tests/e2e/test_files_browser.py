"""The Files page in a real browser (issue 27): a person lists their home, uploads a file,
sees it listed, downloads it (the same bytes, under its own name) and deletes it (asked
first), on a laptop (1280 px) and a phone (390 px), in English and in Simplified Chinese.

A real stack (daphne portal, Celery worker) and a node agent with the SIMULATED runtime: its
homes are plain folders (nodeagent/runtime/simulated_runtime.py), and the home tasks go
through the agent's real calls (wait/, content/, report/). The person has a desktop running
there, so the page asks that node. Every state is checked with axe-core and saved as
``test-output/screenshots/files-<lang>-<step>-<width>.png``.
"""

from __future__ import annotations

import pytest

from people.models import Member
from scheduling.models import HomeTask, Session
from scheduling.services.sessions import check_submit, do_submit

from ..integration.stack import ROOT, wait_for
from .axe import check_axe, describe
from .conftest import log_in, wait_js
from .test_journeys import start_simulated_agent

pytestmark = [pytest.mark.browser, pytest.mark.integration]

SHOTS = ROOT / "test-output" / "screenshots"
WIDTHS = {"laptop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
WORDS = {
    "en": {"uploaded": "Uploaded {name}.", "deleted": "Deleted {name}.", "delete": "Delete"},
    "zh-hans": {"uploaded": "已上传 {name}。", "deleted": "已删除 {name}。", "delete": "删除"},
}
NAMES = {"en": "notes {width}.txt", "zh-hans": "报告 {width}.txt"}


def listing_done(page) -> str:
    """Wait until the page's listing has ended; its text."""
    return wait_js(
        page,
        """() => {
          const task = document.querySelector("#files-listing .files-task");
          return task && task.dataset.state !== "PENDING" && task.textContent;
        }""",
    )


def check(page, label: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"files-{label}.png"), full_page=True)
    violations = check_axe(page, f"files-{label}")
    assert not violations, f"{label} ({page.url}):\n{describe(violations)}"


def entry(page, name: str):
    return page.locator("#files-listing .files-entry").filter(has_text=name)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_list_upload_download_and_delete_a_file(
    stack, owner, profile, new_page, tmp_path, language
):
    Member.objects.update_or_create(user=owner, defaults={"language": language})
    start_simulated_agent(stack, tmp_path)
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    wait_for(lambda: Session.objects.get(pk=session.pk).state == "RUNNING", 60, "RUNNING")
    words = WORDS[language]
    asked: list[str] = []
    page = new_page()
    log_in(page, "ada", "pw-ada")
    assert page.get_attribute("html", "lang") == language
    for width, size in WIDTHS.items():
        page.set_viewport_size(size)
        name = NAMES[language].format(width=size["width"])
        data = f"{language} {width}: 9:58, before class\n".encode() * 50
        label = f"{language}-{{}}-{size['width']}"

        # The navigation's Files entry; the page lists the home (asked of the node).
        page.goto("/")
        with page.expect_navigation():
            page.locator("header nav a[href='/files/']").click()
        assert stack.node in page.inner_text("#files-place")
        listing_done(page)
        check(page, label.format("list"))

        # Upload: the page waits for the upload, then lists the folder with the file in it.
        page.set_input_files(
            "#files-upload", files=[{"name": name, "mimeType": "text/plain", "buffer": data}]
        )
        with page.expect_navigation():
            page.click("#files-upload-form button[type=submit]")
        wait_js(page, "(name) => document.body.textContent.includes(name)",
                words["uploaded"].format(name=name))  # fmt: skip
        assert name in listing_done(page)
        assert HomeTask.objects.filter(user=owner, kind="upload", path=name, state="DONE").exists()
        check(page, label.format("uploaded"))

        # Download: the same bytes, saved under the file's own name.
        with page.expect_download() as saved:
            entry(page, name).locator("form[action='/files/download/'] button").click()
        download = saved.value
        assert download.suggested_filename == name
        with open(download.path(), "rb") as f:
            assert f.read() == data
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
        wait_js(page, "(text) => document.body.textContent.includes(text)",
                words["deleted"].format(name=name))  # fmt: skip
        assert name not in listing_done(page).replace(words["deleted"].format(name=name), "")
        check(page, label.format("deleted"))
