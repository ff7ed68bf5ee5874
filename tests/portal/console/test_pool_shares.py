"""The console's pool page shows a shared GPU's MPS health as the agent last reported it."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduling.models import Gpu

pytestmark = pytest.mark.django_db

POOL = "/console/pool/"
HEALTH = "MPS running: 4 shares of 10240 MB, 25% of the SMs each; restarted 1×"


@pytest.fixture
def admin(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def test_a_shared_gpus_mps_health_is_on_the_pool_page(admin, pool):
    gpu = Gpu.objects.order_by("pk").first()
    assert gpu is not None
    Gpu.objects.filter(pk=gpu.pk).update(metrics={"utilization_pct": 3.0, "share_health": HEALTH})

    html = admin.get(POOL).content.decode()

    assert html.count("data-share-health") == 1
    assert f"<dd data-share-health>{HEALTH}</dd>" in html
    assert "Shares (MPS)" in html


def test_gpus_not_in_share_mode_show_no_mps_line(admin, pool):
    assert "data-share-health" not in admin.get(POOL).content.decode()
