"""Issue 38, item 3: with every node cordoned, a queued request says the pool is closed.

On the walk, a request queued while every node was cordoned named a missing CPU/memory fit and
an estimated start of "now". With no healthy node that takes new desktops the queue reason is
``pool_closed`` with no estimate, and the request form says the same instead of "starts now"
or "no free slice fits".
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone, translation

from scheduling.choices import SessionState
from scheduling.engine.reasons import Code, Reason
from scheduling.models import DesktopProfile, Session
from scheduling.presenters import render_reason
from scheduling.services.catalogue import profile_offers
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.health import do_cordon
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import gpu_inventory

pytestmark = pytest.mark.django_db

CLOSED_EN = (
    "The pool is closed for maintenance: no node takes new desktops. You keep your place; "
    "it starts when a node opens."
)

CLOSED_ZH = (
    "资源池正在维护，已关闭：没有节点接受新的桌面。您的排队位置会保留；有节点开放时即会启动。"
)


@pytest.fixture(autouse=True)
def _default_language_after():
    yield
    translation.deactivate()


@pytest.fixture
def cpu_profile(db):
    return DesktopProfile.objects.create(
        slug="cpu-only",
        name="CPU only",
        image="deskpool/tiny:latest",
        cpus=1,
        memory_mb=1024,
        gpu_count=0,
        gpu_memory_min_mb=0,
        allowed_kinds=["share"],
        pids_limit=256,
        shm_mb=64,
    )


def queued(user, profile) -> Session:
    return do_submit(user, check_submit(user, profile.pk, "hobby", None))


def test_with_every_node_cordoned_a_queued_request_says_the_pool_is_closed(
    pool, register_node, profile, cpu_profile, owner
):
    other, _ = register_node("node-2", [gpu_inventory("GPU-z", 0, shares=2)])
    for node in (pool, other):
        assert do_cordon(node, "admin", "maintenance")
    gpu = queued(owner, profile)
    cpu = queued(owner, cpu_profile)
    do_scheduling_cycle()
    for session in (gpu, cpu):
        session.refresh_from_db()
        assert session.state == SessionState.QUEUED
        assert session.reason_code == Code.POOL_CLOSED
        assert session.eta is None
        assert session.reason == CLOSED_EN
    assert [gpu.queue_position, cpu.queue_position] == [1, 2]


def test_one_open_node_gives_the_usual_reasons_again(pool, register_node, profile, owner):
    other, _ = register_node("node-2", [gpu_inventory("GPU-z", 0, shares=2)])
    do_cordon(other, "admin", "maintenance")
    session = queued(owner, profile)
    do_scheduling_cycle()
    session.refresh_from_db()
    assert session.reason_code != Code.POOL_CLOSED
    assert session.state != SessionState.QUEUED or session.eta is not None


def test_the_request_form_says_the_pool_is_closed_instead_of_starts_now(
    pool, profile, cpu_profile, owner
):
    do_cordon(pool, "admin", "maintenance")
    offers = {o.profile.slug: o for o in profile_offers(timezone.now())}
    for offer in offers.values():
        assert (offer.starts_now, offer.wait_minutes, offer.unavailable) == (False, None, "")
        assert offer.closed == CLOSED_EN
    client = Client()
    client.force_login(owner)
    page = client.get("/").content.decode()
    assert CLOSED_EN in page
    assert "starts now" not in page and "no free slice fits it" not in page


def test_an_open_pool_offers_no_closed_words(pool, profile):
    [offer] = [o for o in profile_offers(timezone.now()) if o.profile.pk == profile.pk]
    assert offer.closed == "" and offer.starts_now is True


def test_the_reason_reads_in_chinese():
    """Needs the zh-Hans catalogue entry for the sentence (issue 38's catalogue update)."""
    with translation.override("zh-hans"):
        text = render_reason(Reason(Code.POOL_CLOSED, {"tier": "hobby", "ahead": 0}))
    assert text == CLOSED_ZH
