"""Whatever races, the database never lets two live allocations hold one slice."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.choices import SessionState
from scheduling.models import Allocation, Node, Session, Slice
from scheduling.services.cycle import do_scheduling_cycle

pytestmark = pytest.mark.django_db(transaction=True)


def api_token(user) -> str:
    """The user's API token, through the login endpoint (the conftest's password)."""
    credentials = {"username": user.username, "password": "pw-" + user.username}
    return APIClient().post("/api/v1/auth/token/", credentials, format="json").json()["token"]


def test_a_second_live_allocation_on_one_slice_is_refused_by_the_database(owner, profile, pool):
    from scheduling.services.sessions import check_submit, do_submit

    first = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    second = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    slice_ = Slice.objects.first()
    Allocation.objects.create(session=first, node=pool, slice=slice_)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(session=second, node=pool, slice=slice_)
    # Once released, the slice may be held again.
    Allocation.objects.filter(session=first).update(released_at="2026-01-01T00:00Z")
    Allocation.objects.create(session=second, node=pool, slice=slice_)


def test_twenty_concurrent_submissions_on_ten_slices(make_user, profile, pool):
    users = [make_user(f"student{i:02d}") for i in range(20)]
    tokens = {user.pk: api_token(user) for user in users}
    start = threading.Barrier(20)

    def submit(user) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token " + tokens[user.pk])
        start.wait()
        try:
            return client.post(
                "/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"}, format="json"
            ).status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(20) as pool_:
        codes = list(pool_.map(submit, users))
    assert codes == [201] * 20

    # Four cycles race each other without the single-flight lock: only the constraint and
    # the conditional state updates stand between them and a double booking. (The node's
    # heartbeat is renewed first: twenty logins on a loaded machine can outlast its timeout.)
    Node.objects.filter(pk=pool.pk).update(last_heartbeat=timezone.now())
    cycles = threading.Barrier(4)

    def cycle() -> None:
        cycles.wait()
        try:
            do_scheduling_cycle()
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool_:
        list(pool_.map(lambda _: cycle(), range(4)))
    do_scheduling_cycle()  # settle positions after any lost races

    live = Allocation.objects.filter(released_at=None)
    assert live.count() == 10
    assert live.values("slice").distinct().count() == 10
    assert Session.objects.filter(state=SessionState.PLACED).count() == 10
    queued = Session.objects.filter(state=SessionState.QUEUED).order_by("queue_position")
    assert [s.queue_position for s in queued] == list(range(1, 11))
    assert all(s.reason.startswith("waiting for a free slice") for s in queued)


def test_twelve_submissions_at_once_by_one_student_respect_the_open_session_limit(
    owner, profile, pool, settings
):
    from scheduling.services.sessions import MAX_OPEN_SESSIONS_PER_USER

    # The open-session limit alone (the rate limit would refuse some first: its own tests
    # are tests/security/test_session_rate_limit.py).
    settings.SESSION_RATE_PERIOD_S = 0
    token = api_token(owner)
    start = threading.Barrier(12)

    def submit(_: int) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token " + token)
        start.wait()
        try:
            return client.post(
                "/api/v1/sessions/", {"profile": profile.pk, "purpose": "hobby"}, format="json"
            ).status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(12) as pool_:
        codes = sorted(pool_.map(submit, range(12)))
    limit = MAX_OPEN_SESSIONS_PER_USER
    assert codes == [201] * limit + [400] * (12 - limit)
    assert Session.objects.filter(user=owner).count() == limit
