"""Issue 38 on PostgreSQL, through the real cycle: a small hobby desktop goes to a free MIG
instance rather than a whole NVLink A100, and when only a whole A100 is free it runs there
but is billed the small slice it asked for; a profile that asks for a whole GPU pays one.
The records, the usage quotas count and the report rows show the billed figure."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from scheduling.choices import ON_NODE_STATES, SessionState
from scheduling.models import Allocation, DesktopProfile, Session, Slice, UsageRecord
from scheduling.services.accounting import check_price, do_price, usage_report
from scheduling.services.agent_sessions import do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.sessions import check_submit, do_submit
from scheduling.services.usage import collect_usage

from ..conftest import TEST_IMAGE, gpu_inventory

pytestmark = pytest.mark.django_db


def whole_a100(uuid: str, index: int, peers: list[str]) -> dict:
    gpu = gpu_inventory(uuid, index, mig_slices=1)
    gpu.update(mig_mode=False, mig_instances=[], sharing="whole", nvlink_peers=peers)
    return gpu


@pytest.fixture
def nvlink_node(register_node):
    node, _ = register_node(
        "a100-nvl", [whole_a100("GPU-w0", 0, ["GPU-w1"]), whole_a100("GPU-w1", 1, ["GPU-w0"])]
    )
    return node


@pytest.fixture
def mig_node(register_node):
    node, _ = register_node("a100-mig", [gpu_inventory("GPU-m0", 0, mig_slices=2)])
    return node


def small(slug: str = "sketch", kinds=("mig", "share", "whole"), memory: int = 8000):
    return DesktopProfile.objects.create(
        slug=slug,
        name=slug,
        image=TEST_IMAGE,
        cpus=0.5,
        memory_mb=512,
        gpu_count=1,
        gpu_memory_min_mb=memory,
        allowed_kinds=list(kinds),
    )


def run(user, profile) -> Session:
    session = do_submit(user, check_submit(user, profile.pk, "hobby", None))
    do_scheduling_cycle()
    session = Session.objects.get(pk=session.pk)
    assert session.state == SessionState.PLACED and session.node is not None
    return do_report(session.node, session.pk, {"state": "RUNNING", "port": 32000})


def held_kind(session: Session) -> str:
    [hold] = Allocation.objects.filter(session=session, released_at=None).select_related("slice")
    assert hold.slice is not None
    return hold.slice.kind


def test_a_small_desktop_takes_the_free_mig_instance_not_a_whole_nvlink_a100(
    owner, nvlink_node, mig_node
):
    session = run(owner, small())
    assert session.node == mig_node and held_kind(session) == "mig"
    [record] = UsageRecord.objects.filter(session=session)
    assert (record.slice_kind, record.mig_profile, record.gpu_share) == ("mig", "1g.10gb", 0.142)


def price(kind: str, amount: str):
    return check_price(
        slice_kind=kind,
        profile="",
        unit="gpu_hour",
        price=Decimal(amount),
        currency="CHF",
        valid_from=date(2026, 1, 1),
        valid_until=None,
    )


def test_on_a_whole_gpu_a_small_profile_is_billed_its_slice_and_a_whole_profile_a_card(
    owner, make_user, admin_user, nvlink_node, mig_node
):
    blockers = small("blocker")  # ben and dan hold both MIG instances
    assert [held_kind(run(make_user(name), blockers)) for name in ("ben", "dan")] == ["mig"] * 2
    first = Slice.objects.filter(gpu__node=mig_node).first()
    assert first is not None

    session = run(owner, small())
    assert session.node == nvlink_node and held_kind(session) == "whole"
    mig_cu = first.gpu.compute_units
    one_g = round(mig_cu * 142 / 1000, 4)
    assert session.compute_units == pytest.approx(one_g)  # not the card's
    [record] = UsageRecord.objects.filter(session=session)
    assert (record.slice_kind, record.mig_profile) == ("mig", "1g.10gb")
    assert record.gpu_share == pytest.approx(0.142) and record.compute_units == one_g
    assert record.node_hostname == "a100-nvl" and "A100" in record.gpu_model  # where it ran

    whole_gpu = small("thesis-card", kinds=("whole",), memory=40000)
    card = run(make_user("cy"), whole_gpu)
    card_slice = Allocation.objects.get(session=card, released_at=None).slice
    assert card_slice is not None
    card_cu = card_slice.gpu.compute_units
    assert held_kind(card) == "whole" and card.compute_units == pytest.approx(card_cu)
    [card_record] = UsageRecord.objects.filter(session=card)
    assert (card_record.slice_kind, card_record.gpu_share) == ("whole", 1.0)
    assert card_record.compute_units == pytest.approx(card_cu) and card_cu > 5 * one_g

    # An hour on: the report rows and the weekly use the quotas read count the billed
    # figures (a MIG GPU-hour at 1.00, a whole one at 3.00).
    do_price(admin_user, price("mig", "1.00"))
    do_price(admin_user, price("whole", "3.00"))
    assert session.started_at is not None and card.started_at is not None
    later = max(session.started_at, card.started_at) + timedelta(hours=1)
    week = collect_usage(later, 7.0, ON_NODE_STATES).week
    assert week[("user", "ada")] == pytest.approx(one_g, rel=1e-3)
    assert week[("user", "cy")] == pytest.approx(card_cu, rel=1e-3)
    today = timezone.localdate()
    rows = {r.key: r for r in usage_report("user", "week", today, today, now=later)}
    ada, cy = rows["ada"], rows["cy"]
    assert ada.gpu_hours == pytest.approx(Decimal("0.142"), abs=Decimal("0.001"))
    assert ada.cu_hours == pytest.approx(Decimal(str(one_g)), abs=Decimal("0.002"))
    assert ada.cost == pytest.approx(Decimal("0.142"), abs=Decimal("0.01"))
    assert cy.gpu_hours == pytest.approx(Decimal(1), abs=Decimal("0.001"))
    assert cy.cost == pytest.approx(Decimal("3.00"), abs=Decimal("0.01"))
