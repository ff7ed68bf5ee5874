"""A refused MIG layout on the console's pool page (issue 37 item 2), in English and
Simplified Chinese: the GPU is marked, the reason is in words, and no slice of it is drawn.
The words are the catalogue's: in zh-Hans they are English until it has them."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import translation

from scheduling.models import Gpu
from tests.conftest import gpu_inventory

pytestmark = pytest.mark.django_db

POOL = "/console/pool/"


def overlapping_gpu(uuid: str, index: int) -> dict:
    gpu = gpu_inventory(uuid, index, mig_slices=2)
    gpu["mig_instances"] = [
        {"uuid": f"MIG-{uuid}-0", "profile": "3g.40gb", "memory_mb": 40192, "start": 0},
        {"uuid": f"MIG-{uuid}-1", "profile": "2g.20gb", "memory_mb": 19968, "start": 2},
    ]
    return gpu


@pytest.mark.parametrize("language", ["en", "zh-Hans"])
def test_the_pool_page_says_why_a_mig_layout_is_refused(
    admin_user, register_node, owner, language: str
):
    register_node("gpu-m01", [overlapping_gpu("GPU-m", 0), gpu_inventory("GPU-n", 1, mig_slices=2)])
    refused, fine = Gpu.objects.get(uuid="GPU-m"), Gpu.objects.get(uuid="GPU-n")
    admin = Client(HTTP_ACCEPT_LANGUAGE=language)
    admin.force_login(admin_user)
    html = admin.get(POOL).content.decode()
    with translation.override(language):
        badge = translation.gettext("MIG layout refused")
        reason = translation.gettext(
            "The %(profile)s instance at memory slice %(start)s overlaps another."
        ) % {"profile": "2g.20gb", "start": 2}
        no_work = translation.gettext(
            "The GPU takes no work until its agent reports a layout the portal allows."
        )
    assert f'data-mig-layout="{refused.pk}"' in html
    assert f'data-mig-layout="{fine.pk}"' not in html
    assert badge in html and reason in html and no_work in html
    # The refused GPU draws no slice; the other one its two instances.
    assert html.count('class="pool-seg') == 2
    fragment = admin.get("/console/pool/fragment/").content.decode()
    assert f'data-mig-layout="{refused.pk}"' in fragment

    # Students see nothing of it.
    student = Client()
    student.force_login(owner)
    assert student.get(POOL).status_code == 404
