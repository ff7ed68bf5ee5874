"""A profile no node of the pool could ever run is not offered as one that starts.

Issue 25, item 8a: on a 2-CPU host a profile needing 4 CPUs was offered on the student home
as "starts now", then failed with Docker's words. The home page and the API mark it
unavailable with the reason, submit refuses it, and a queued request of it says so.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone, translation
from rest_framework.test import APIClient

from scheduling import engine
from scheduling.engine.reasons import Code
from scheduling.models import DesktopProfile, Node
from scheduling.presenters import render_reason
from scheduling.services import ServiceError
from scheduling.services.catalogue import profile_offers
from scheduling.services.feasibility import never_fitting
from scheduling.services.nodes import do_create_join_token, do_register
from scheduling.services.sessions import check_submit
from tests.conftest import gpu_inventory, registration

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _default_language_after():
    yield
    translation.deactivate()


@pytest.fixture
def small_host(db):
    """One healthy node with 2 CPUs, 4 GB and one T4 in 2 shares (like a laptop demo)."""
    token = do_create_join_token("laptop", actor="test")
    body = registration("laptop", [gpu_inventory("GPU-t4", 0, shares=2)], token)
    body.update(cpu_count=2, memory_mb=4096)
    node, _ = do_register(body, None)
    assert node.is_healthy()
    return node


def make_profile(slug: str, **fields) -> DesktopProfile:
    values = dict(
        name=slug.title(),
        image="deskpool/tiny:latest",
        cpus=1,
        memory_mb=1024,
        gpu_count=1,
        gpu_memory_min_mb=4000,
        allowed_kinds=["share"],
        pids_limit=256,
        shm_mb=64,
    )
    values.update(fields)
    return DesktopProfile.objects.create(slug=slug, **values)


def test_a_profile_needing_more_cpus_than_any_node_has_is_marked_unavailable(small_host):
    big = make_profile("big", cpus=4)
    fits = make_profile("fits", cpus=2)
    offers = {o.profile.slug: o for o in profile_offers(timezone.now())}
    assert offers["big"].starts_now is False
    assert offers["big"].wait_minutes is None
    assert offers["big"].unavailable == (
        "no node in the pool has 4 CPUs for this profile (the largest has 2); ask an admin, "
        "or pick another profile"
    )
    assert offers["fits"].starts_now is True and offers["fits"].unavailable == ""
    assert set(never_fitting([big, fits], timezone.now())) == {big.pk}


def test_memory_gpu_memory_and_slice_kind_are_checked_as_the_scheduler_does(small_host):
    ram = make_profile("ram", memory_mb=8192)
    gpu_memory = make_profile("gpumem", gpu_memory_min_mb=40000)
    kind = make_profile("mig", allowed_kinds=["mig"])
    two_gpus = make_profile("two", gpu_count=2)
    fine = make_profile("fine")
    never = never_fitting([ram, gpu_memory, kind, two_gpus, fine], timezone.now())
    assert set(never) == {ram.pk, gpu_memory.pk, kind.pk, two_gpus.pk}
    assert never[ram.pk].params["short"] == ["ram"]
    assert "8192 MB of memory" in render_reason(never[ram.pk])
    assert render_reason(never[kind.pk]).startswith("no healthy node in the pool can run")


def test_the_home_page_shows_the_reason_and_does_not_offer_it_as_starting(small_host, owner):
    big = make_profile("big", cpus=4)
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    client.force_login(owner)
    page = client.get("/").content.decode()
    start = page.index(f'id="profile-{big.pk}"')
    offer = page[start : page.index("</div>", start)]
    assert "disabled" in offer[: offer.index(">")]
    assert "不可用" in offer  # "Not available:"
    with translation.override("zh-hans"):
        expected = render_reason(never_fitting([big], timezone.now())[big.pk])
    assert expected in offer and "CPU" in expected and "ask an admin" not in expected
    assert "starts now" not in offer and "立即开始" not in offer


def test_submit_refuses_it_with_a_translated_error(small_host, owner):
    big = make_profile("big", cpus=4)
    with translation.override("zh-hans"), pytest.raises(ServiceError) as refused:
        check_submit(owner, big.pk, "hobby", None)
    assert refused.value.field == "profile"
    assert "ask an admin" not in refused.value.message and "4" in refused.value.message
    with pytest.raises(ServiceError) as refused:
        check_submit(owner, big.pk, "hobby", None)
    assert refused.value.message == (
        "No node in the pool has 4 CPUs for this profile (the largest has 2); ask an admin, "
        "or pick another profile"
    )


def test_the_api_lists_it_as_unavailable_with_the_reason_and_refuses_it(small_host, owner):
    big = make_profile("big", cpus=4)
    fine = make_profile("fine")
    client = APIClient()
    client.force_authenticate(owner)
    listed = {p["slug"]: p for p in client.get("/api/v1/profiles/").json()}
    assert listed["big"]["available"] is False
    assert "4 CPUs" in listed["big"]["unavailable_reason"]
    assert (listed["fine"]["available"], listed["fine"]["unavailable_reason"]) == (True, "")
    answer = client.post("/api/v1/sessions/", {"profile": big.pk, "purpose": "hobby"})
    assert answer.status_code == 400, answer.content
    assert "4 CPUs" in str(answer.json())
    assert (
        client.post("/api/v1/sessions/", {"profile": fine.pk, "purpose": "hobby"}).status_code
        == 201
    )


def test_with_no_healthy_node_at_all_every_profile_stays_available(small_host, owner):
    big = make_profile("big", cpus=4)
    Node.objects.update(last_heartbeat=timezone.now() - timedelta(days=1))
    assert never_fitting([big], timezone.now()) == {}
    check_submit(owner, big.pk, "hobby", None)  # queued until a node is back


def test_the_pool_is_read_once_while_its_nodes_stay_as_they_were(small_host):
    big = make_profile("big", cpus=4)
    assert big.pk in never_fitting([big], timezone.now())  # reads the pool
    with CaptureQueriesContext(connection) as again:
        assert big.pk in never_fitting([big], timezone.now())
    assert len(again) == 1, [q["sql"] for q in again]  # only: are the nodes as they were?


def test_a_node_that_changes_is_seen_at_the_next_check(small_host):
    big = make_profile("big", cpus=4)
    assert big.pk in never_fitting([big], timezone.now())
    token = do_create_join_token("workstation", actor="test")
    body = registration("workstation", [gpu_inventory("GPU-w", 0, shares=2)], token)
    body.update(cpu_count=8, memory_mb=32768)
    do_register(body, None)
    assert never_fitting([big], timezone.now()) == {}  # the new node can run it
    Node.objects.filter(hostname="workstation").update(cordoned=True)
    assert big.pk in never_fitting([big], timezone.now())  # cordoned: takes nothing new


def test_the_engine_gives_a_queued_request_too_big_for_every_node_no_fit():
    now = timezone.now()
    node = engine.NodeState(1, "laptop", True, 2.0, 4096, cpus_total=2.0, memory_total_mb=4096)
    request = engine.QueuedRequest(
        session_id=7,
        tier=2,
        submitted_at=now,
        gpu_count=0,
        gpu_memory_min_mb=0,
        allowed_kinds=(),
        cpus=4.0,
        memory_mb=1024,
    )
    plan = engine.plan(engine.Snapshot(nodes=(node,), free_slices=(), queue=(request,)), now)
    assert plan.placements == []
    [entry] = plan.queue
    assert entry.reason.code == Code.NO_FIT
    assert entry.reason.params["short"] == ["cpus"] and entry.reason.params["most_cpus"] == 2.0
