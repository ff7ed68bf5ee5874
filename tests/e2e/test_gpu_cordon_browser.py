"""A sick GPU on the console's pool page, in a real browser, in English and Simplified
Chinese: a heartbeat with XID 79 cordons GPU 0; the admin sees it marked cordoned, the cause
in words and the Uncordon and Drain buttons, says why and uncordons it (audited). Debian's
chromium (Playwright) in front of a real stack; axe at each step (no serious or critical
violation). The words are the catalogue's: in zh-Hans they are English until it has them."""

from __future__ import annotations

import pytest
from django.utils import translation

from scheduling.choices import AuditKind
from scheduling.models import AuditEvent, Gpu, Node
from scheduling.services.nodes import do_heartbeat

from ..conftest import gpu_inventory
from .conftest import log_in
from .test_console_journey import off_the_browsers_thread
from .test_journeys import LANGUAGES, Journey

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def reading(uuid: str, xids: list[int]) -> dict:
    return {
        "uuid": uuid, "utilization_pct": 5.0, "memory_used_mb": 100, "temperature_c": 40.0,
        "power_w": 60.0, "ecc_uncorrected_volatile": 0, "xid_errors": xids,
        "health": {"lost": False},
    }  # fmt: skip


def words(language: str, *texts: str) -> list[str]:
    with translation.override(language):
        return [translation.gettext(text) for text in texts]


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_admin_sees_a_gpu_cordoned_for_xid_79_and_uncordons_it(
    stack, admin_user, new_page, register_node, language
):
    node, _token = register_node(
        "gpu-a01",
        [gpu_inventory("GPU-a", 0, mig_slices=2), gpu_inventory("GPU-b", 1, mig_slices=2)],
    )
    off_the_browsers_thread(
        lambda: do_heartbeat(
            Node.objects.get(pk=node.pk),
            {"gpus": [reading("GPU-a", [79]), reading("GPU-b", [])], "running_sessions": []},
        )
    )
    sick = Gpu.objects.get(uuid="GPU-a")
    assert sick.cordoned

    admin = new_page()
    log_in(admin, "root", "pw-root")
    journey = Journey(admin, "admin", language)
    journey.choose_language("root")
    admin.goto("/console/pool/")
    section = admin.locator(f"section[aria-labelledby='gpu-{sick.pk}-title']")
    cordoned, because, xid, uncordon, drain = words(
        language, "cordoned", "Cordoned because:", "XID %(code)s", "Uncordon", "Drain"
    )
    assert cordoned in section.locator("h3").inner_text()
    assert section.locator(f"[data-gpu-cordon='{sick.pk}']").inner_text() == (
        f"{because} {xid % {'code': 79}}"
    )
    actions = section.locator(f"[data-cordon-actions='gpu-{sick.pk}']")
    assert actions.locator("button[value=uncordon]").inner_text() == uncordon
    assert actions.locator("button[value=drain]").inner_text() == drain
    well = Gpu.objects.get(uuid="GPU-b")
    assert admin.locator(f"[data-cordon-actions='gpu-{well.pk}']").count() == 0
    journey.step("gpu-cordoned", phone=True)

    actions.locator("input[name=reason]").fill("card reseated")
    with admin.expect_navigation():
        actions.locator("button[value=uncordon]").click()
    assert not Gpu.objects.get(pk=sick.pk).cordoned
    cleared = AuditEvent.objects.get(kind=AuditKind.GPU_CORDON_CLEARED)
    assert (cleared.actor, cleared.data["reason"]) == ("user:root", "card reseated")
    assert admin.locator(f"[data-cordon-actions='gpu-{sick.pk}']").count() == 0
    journey.step("gpu-uncordoned")
