"""A full home says so (issue 36, item 2): the node's disk bounds a home by its quota
(tests/nodeagent/test_home_quota.py), the portal sends that quota with each desired session,
and the Files page and the desktop page tell the person when their home was last measured
full (at HOME_FULL_AT of the quota: the disk refuses writes a little before the last byte)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nodeagent.protocol import SessionUsage
from scheduling.choices import SessionState
from scheduling.models import HomeUsage, Node, Quota, Session
from scheduling.services.agent_sessions import desired_sessions
from scheduling.services.home_files import MB, home_full
from scheduling.services.nodes import record_node_usage
from tests.portal.student.test_files_page import home_node, signed_in  # noqa: F401
from tests.portal.student.test_limit_pages import desktop_page
from tests.scheduling.test_lifecycle import run_desktop

pytestmark = [pytest.mark.django_db]

FULL_FILES = '<p id="files-full" class="error">Your home folder is full: delete files before'
FULL_DESKTOP = (
    '<p id="desktop-home-full" class="notice error" role="alert">Your home folder is full: '
    "programs in this desktop cannot save until you delete files (Controls, then Files).</p>"
)


def measured(user, used_bytes: int) -> None:  # type: ignore[no-untyped-def]
    HomeUsage.objects.update_or_create(
        user=user, defaults={"used_bytes": used_bytes, "node_hostname": "node-1"}
    )


def test_full_is_at_98_percent_of_the_quota_and_never_without_one() -> None:
    assert home_full(98 * MB, 100 * MB)
    assert not home_full(97 * MB, 100 * MB)
    assert not home_full(None, 100 * MB)
    assert not home_full(10**12, 0)  # no quota: never full


def test_the_files_page_says_a_home_is_full(owner, home_node, settings) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    settings.HOME_QUOTA_MB = 100
    client = signed_in(owner)
    measured(owner, 90 * MB)
    assert FULL_FILES not in client.get("/files/").content.decode()
    measured(owner, 99 * MB)  # the disk refused the last writes
    html = client.get("/files/").content.decode()
    assert FULL_FILES in html
    # The upload's refusal by the node's disk (507) is said in the page's language.
    assert re.search(
        r'data-full="Your home folder is full: delete files before you upload more\."', html
    )


def test_the_desktop_page_says_a_home_is_full(owner, profile, pool, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOME_QUOTA_MB = 100
    session = run_desktop(owner, profile)
    client = signed_in(owner)
    assert FULL_DESKTOP not in desktop_page(client, session)
    measured(owner, 100 * MB)
    html = desktop_page(client, session)
    assert FULL_DESKTOP in html
    config = re.search(r'<script id="page-config" type="application/json">(.*?)</script>', html)
    assert config and "Your home folder is full: delete files before you upload more." in (
        config.group(1)
    )


def test_the_desired_session_carries_the_persons_home_quota(owner, profile, pool, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOME_QUOTA_MB = 2048
    session = run_desktop(owner, profile)
    node = Node.objects.get(pk=session.node_id)
    [desired] = desired_sessions(node)
    assert desired.home_quota_mb == 2048
    Quota.objects.create(scope="user", key=owner.get_username(), max_home_mb=300)
    [desired] = desired_sessions(node)
    assert desired.home_quota_mb == 300


def test_the_heartbeat_measures_the_home_and_the_desktop_page_says_it_is_full(
    owner, stranger, profile, pool, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.HOME_QUOTA_MB = 100
    session = run_desktop(owner, profile)
    node = Node.objects.get(pk=session.node_id)
    other = run_desktop(stranger, profile)
    Session.objects.filter(pk=other.pk).update(node=None)  # not this node's: ignored
    record_node_usage(
        node,
        [
            SessionUsage(session_id=session.pk, cpu_pct=1.0, home_used_bytes=100 * MB),
            SessionUsage(session_id=other.pk, home_used_bytes=100 * MB),
        ],
        timezone.now(),
    )
    usage = HomeUsage.objects.get(user=owner)
    assert (usage.used_bytes, usage.node_hostname) == (100 * MB, node.hostname)
    assert not HomeUsage.objects.filter(user=stranger).exists()
    assert FULL_DESKTOP in desktop_page(signed_in(owner), session)
    # Files deleted: the next heartbeat's measure takes the notice away.
    record_node_usage(
        node, [SessionUsage(session_id=session.pk, home_used_bytes=MB)], timezone.now()
    )
    assert HomeUsage.objects.get(user=owner).used_bytes == MB
    assert FULL_DESKTOP not in desktop_page(signed_in(owner), session)


def test_the_homes_of_30_sessions_cost_the_heartbeat_as_many_queries_as_of_3(
    make_user, profile, pool
) -> None:  # type: ignore[no-untyped-def]
    node = Node.objects.get(pk=pool.pk)

    def heartbeat_queries(count: int) -> int:
        sessions = [
            Session.objects.create(
                user=make_user(f"h{count}-{index}"),
                profile=profile,
                state=SessionState.RUNNING,
                node=node,
            )
            for index in range(count)
        ]
        usage = [SessionUsage(session_id=s.pk, home_used_bytes=s.pk * MB) for s in sessions]
        HomeUsage.objects.create(user=sessions[0].user, used_bytes=0)  # one there, the rest new
        with CaptureQueriesContext(connection) as queries:
            record_node_usage(node, usage, timezone.now())
        users = [s.user_id for s in sessions]
        recorded = HomeUsage.objects.filter(user__in=users).values_list("used_bytes", flat=True)
        assert sorted(recorded) == sorted(s.pk * MB for s in sessions)
        return len(queries.captured_queries)

    assert heartbeat_queries(3) == heartbeat_queries(30)
