"""The request form's catalogue: what each profile gives and the wait it has now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Allocation, DesktopProfile, Session, Slice
from scheduling.services.bookings import pool_records
from scheduling.services.catalogue import profile_offers

pytestmark = pytest.mark.django_db


def offer_of(profile, now):
    [offer] = [o for o in profile_offers(now) if o.profile.pk == profile.pk]
    return offer


def hold_every_slice(owner, profile, node, started_at):
    """Running sessions on every slice the profile could use, all started at ``started_at``."""
    for slice_ in Slice.objects.all():
        session = Session.objects.create(
            user=owner,
            profile=profile,
            purpose="hobby",
            state="RUNNING",
            node=node,
            started_at=started_at,
        )
        Allocation.objects.create(session=session, node=node, slice=slice_)


def test_a_free_fitting_slice_on_a_healthy_node_starts_now(pool, profile):
    offer = offer_of(profile, timezone.now())
    assert (offer.starts_now, offer.wait_minutes) == (True, 0)
    assert offer.kinds == ("MIG instance", "Time-sliced share")
    assert offer.gpu_models == ()


def test_with_every_slice_busy_the_wait_is_the_earliest_time_limit(pool, profile, owner):
    now = timezone.now()
    profile.max_duration_minutes = 120
    profile.save()
    hold_every_slice(owner, profile, pool, now - timedelta(minutes=90))
    offer = offer_of(profile, now)
    assert offer.starts_now is False
    assert offer.wait_minutes == 30


def test_requests_already_waiting_push_the_estimate_back(pool, profile, owner, make_user):
    now = timezone.now()
    profile.max_duration_minutes = 120
    profile.save()
    hold_every_slice(owner, profile, pool, now - timedelta(minutes=90))
    [first] = Session.objects.filter(state="RUNNING").order_by("pk")[:1]
    first.started_at = now - timedelta(minutes=110)  # frees in 10 minutes
    first.save()
    assert offer_of(profile, now).wait_minutes == 10
    Session.objects.create(user=make_user("cy"), profile=profile, purpose="thesis")
    assert offer_of(profile, now).wait_minutes == 30  # the one ahead takes the first slice


def test_a_profile_no_node_can_serve_has_no_estimate(pool, profile):
    h100 = DesktopProfile.objects.create(
        slug="h100", name="H100 only", image="x", gpu_models=["H100"], allowed_kinds=["mig"]
    )
    offer = offer_of(h100, timezone.now())
    assert (offer.starts_now, offer.wait_minutes, offer.gpu_models) == (False, None, ("H100",))


def test_an_unhealthy_node_offers_nothing(pool, profile):
    later = timezone.now() + timedelta(hours=1)  # the pool's heartbeat is long stale by then
    offer = offer_of(profile, later)
    assert (offer.starts_now, offer.wait_minutes) == (False, None)


def test_a_draining_node_offers_nothing_and_holds_no_booking(pool, profile):
    """A draining node takes no new work: the request form offers none of its slices and a
    booking's check does not count them."""
    pool.draining_since = timezone.now()
    pool.save()
    offer = offer_of(profile, timezone.now())
    assert (offer.starts_now, offer.wait_minutes) == (False, None)
    records = pool_records()
    assert records.slices and not [s for s in records.slices if s.available]
    assert not [n for n in records.nodes if n.available]
