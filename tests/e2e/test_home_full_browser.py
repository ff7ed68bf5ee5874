"""A full home, from the disk to the pages (issue 36, item 2), in a real browser.

ada's home quota is 16 MB. Her deskpool/tiny desktop runs on the stack's Docker agent, whose
homes are loop-mounted images of that size: a program in the desktop writing 64 MB is stopped
by the disk ("No space left on device"), the agent's heartbeat measures the home, and the
Files page and the desktop page then say the home is full, in English and in Chinese, at
1280 and 390 px, axe-checked. The file written before the disk filled reads back whole.
"""

from __future__ import annotations

import pytest

from people.models import Member
from scheduling.models import HomeUsage, Quota, Session
from scheduling.services.home_files import MB
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import TEST_IMAGE

from ..integration.stack import wait_for, write_fleet
from .axe import check_axe, describe
from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.docker]

QUOTA_MB = 16
WIDTHS = {"laptop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
FULL = {
    "en": {
        "files": "Your home folder is full: delete files before you upload more.",
        "desktop": "Your home folder is full: programs in this desktop cannot save until you "
        "delete files (Controls, then Files).",
    },
    "zh-hans": {
        "files": "你的主目录已满：请先删除一些文件再上传。",
        "desktop": "你的主目录已满：删除文件之前，此桌面中的程序无法保存（点“控制”，再点“文件”）。",
    },
}


@pytest.fixture
def small_home_desktop(stack, owner, profile, docker_engine, require_image, tmp_path):
    """ada's desktop on deskpool/tiny with a 16 MB home, RUNNING on the stack's agent."""
    require_image(TEST_IMAGE)
    Quota.objects.create(scope="user", key=owner.get_username(), max_home_mb=QUOTA_MB)
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 1),
    )
    wait_for(lambda: Session.objects.get(pk=session.pk).state == "RUNNING", 120, "RUNNING")
    return Session.objects.get(pk=session.pk)


def in_desktop(docker_engine, session: Session, script: str) -> tuple[int, str]:
    container = docker_engine.containers.get(session.container_id)
    code, output = container.exec_run(["sh", "-c", script], user="1000:1000")
    return code, output.decode(errors="replace")


def test_a_home_filled_from_inside_the_desktop_says_so_on_both_pages(
    stack, owner, small_home_desktop, docker_engine, new_page
):
    session = small_home_desktop
    code, output = in_desktop(
        docker_engine, session, "printf 'chapter 1\\n' > ~/thesis.txt && sync && echo ok"
    )
    assert code == 0 and "ok" in output
    code, output = in_desktop(
        docker_engine, session, "dd if=/dev/zero of=$HOME/fill bs=1M count=64 2>&1; sync"
    )
    assert "No space left on device" in output, output
    code, output = in_desktop(docker_engine, session, "cat ~/thesis.txt")
    assert output == "chapter 1\n"  # what was written before the disk filled is whole

    def measured_full() -> bool:
        usage = HomeUsage.objects.filter(user=owner).first()
        return usage is not None and (usage.used_bytes or 0) >= QUOTA_MB * MB * 0.9

    wait_for(measured_full, 60, "the heartbeat's measure of the full home")

    for language in ("en", "zh-hans"):
        Member.objects.update_or_create(user=owner, defaults={"language": language})
        page = new_page()
        log_in(page, "ada", "pw-ada")
        assert page.get_attribute("html", "lang") == language
        for width, size in WIDTHS.items():
            page.set_viewport_size(size)
            page.goto("/files/")
            assert page.locator("#files-full").inner_text().strip() == FULL[language]["files"]
            check(page, f"home-full-files-{language}-{width}")
            page.goto(f"/desktop/{session.pk}/")
            notice = page.locator("#desktop-home-full")
            assert notice.inner_text().strip() == FULL[language]["desktop"]
            assert notice.get_attribute("role") == "alert"
            check(page, f"home-full-desktop-{language}-{width}")
        page.close()


def check(page, label: str) -> None:
    violations = check_axe(page, label)
    assert not violations, f"{label} ({page.url}):\n{describe(violations)}"
