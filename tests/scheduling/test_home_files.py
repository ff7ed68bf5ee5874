"""Home files (issue 27), the portal's service on the database: which node keeps a person's
home (a desktop running there, where the last one ran, a node sharing homes, one not
answering, none), the refusals and their sentences, the timeout, and each node's desired
home tasks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.choices import SessionState
from scheduling.models import HomeTask, Node, Quota, Session
from scheduling.models.sessions import home_volume_of
from scheduling.services.agent_sessions import desired_state, do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.home_files import (
    MB,
    PENDING_MAX,
    FilesRefused,
    files_place,
    quota_bytes_of,
    start_task,
    task_for,
)
from scheduling.services.home_files_agent import do_home_report
from scheduling.services.sessions import check_submit, do_stop, do_submit

from ..conftest import gpu_inventory
from .test_lifecycle import run_desktop

pytestmark = pytest.mark.django_db


def mig_node(register_node, hostname: str, shared: bool = False) -> Node:  # type: ignore[no-untyped-def]
    node, _ = register_node(hostname, [gpu_inventory(f"GPU-{hostname}", 0, mig_slices=2)])
    Node.objects.filter(pk=node.pk).update(home_root_shared=shared)
    node.refresh_from_db()
    return node


def running_desktop(user, profile) -> Session:  # type: ignore[no-untyped-def]
    session = do_submit(user, check_submit(user, profile.pk, "hobby", None))
    do_scheduling_cycle()
    session.refresh_from_db()
    assert session.node is not None, session.reason
    do_report(session.node, session.pk, {"state": "RUNNING", "port": 32000})
    return Session.objects.get(pk=session.pk)


def ended_desktop(user, profile) -> Session:  # type: ignore[no-untyped-def]
    session = running_desktop(user, profile)
    do_stop(user, session)
    assert session.node is not None
    do_report(session.node, session.pk, {"state": "ENDED"})
    return session


def silence(node: Node) -> None:
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now() - timedelta(hours=1))


def test_a_running_desktops_node_keeps_the_home(register_node, owner, profile):
    node = mig_node(register_node, "gpu-a")
    running_desktop(owner, profile)
    place = files_place(owner)
    assert (place.node, place.running, place.shared, place.reason) == (node, True, False, "")
    assert place.quota_bytes == 10240 * MB
    assert place.used_bytes is None and place.measured_at is None


def test_the_node_where_the_last_desktop_ran_keeps_the_home(register_node, owner, profile):
    node = mig_node(register_node, "gpu-a")
    ended_desktop(owner, profile)
    mig_node(register_node, "gpu-b", shared=True)  # a shared root does not hold this home
    place = files_place(owner)
    assert (place.node, place.running, place.shared) == (node, False, False)


def test_without_a_kept_home_a_node_sharing_homes_answers(register_node, owner, profile):
    silent = mig_node(register_node, "gpu-s1", shared=True)
    silence(silent)
    shared = mig_node(register_node, "gpu-s2", shared=True)
    place = files_place(owner)
    assert (place.node, place.shared, place.running) == (shared, True, False)


def test_no_home_anywhere_says_to_start_a_desktop(register_node, owner):
    mig_node(register_node, "gpu-a")
    place = files_place(owner)
    assert place.node is None
    assert place.reason == (
        "Your home folder is made when your first desktop starts. Start a desktop, then come "
        "back to add files."
    )
    with pytest.raises(FilesRefused) as refused:
        start_task(owner, "list")
    assert refused.value.message == place.reason


def test_a_silent_home_node_gives_no_node_and_says_so(register_node, owner, profile):
    node = mig_node(register_node, "gpu-a")
    ended_desktop(owner, profile)
    silence(node)
    place = files_place(owner)
    assert place.node is None
    assert place.reason == (
        "The node that keeps your home (gpu-a) is not answering. Your files are kept there; "
        "try again later."
    )


def test_the_quota_is_the_persons_then_the_default_then_the_setting(owner, stranger):
    assert quota_bytes_of(owner) == 10240 * MB
    Quota.objects.create(scope="user", key="*", max_home_mb=500)
    assert quota_bytes_of(owner) == 500 * MB
    Quota.objects.create(scope="user", key="ada", max_home_mb=2000)
    Quota.objects.create(scope="user", key="ben", max_sessions=1)  # no home limit: the default
    assert (quota_bytes_of(owner), quota_bytes_of(stranger)) == (2000 * MB, 500 * MB)


@pytest.fixture
def home(register_node, owner, profile) -> Node:  # type: ignore[no-untyped-def]
    node = mig_node(register_node, "gpu-a")
    ended_desktop(owner, profile)
    return node


@pytest.mark.parametrize("path", ["../etc", "/etc", "a//b", "a/./b", "x\n", "é" * 200])
def test_bad_paths_are_refused_with_a_sentence(home, owner, path):
    with pytest.raises(FilesRefused) as refused:
        start_task(owner, "list", path)
    assert refused.value.message.startswith("That path cannot be used")
    assert not HomeTask.objects.exists()


def test_a_too_long_path_and_an_unknown_kind_are_refused(home, owner):
    with pytest.raises(FilesRefused, match="at most 1024 characters"):
        start_task(owner, "list", "a/" * 600)
    for kind in ("move", "upload", "download"):  # uploads and downloads are no task now
        with pytest.raises(FilesRefused, match="Choose list or delete"):
            start_task(owner, kind, "a")
    with pytest.raises(FilesRefused, match="Choose a file or folder"):
        start_task(owner, "delete", "")


def test_at_most_a_few_tasks_wait_at_once(home, owner):
    for _ in range(PENDING_MAX):
        start_task(owner, "list")
    with pytest.raises(FilesRefused) as refused:
        start_task(owner, "list")
    assert refused.value.message == (
        f"{PENDING_MAX} of your file tasks are waiting for gpu-a: wait for them to finish, then "
        "try again."
    )


def test_a_task_its_node_does_not_answer_fails_and_leaves_the_desired_state(home, owner, stranger):
    task = start_task(owner, "list", "docs")
    assert [t.id for t in desired_state(home).home_tasks] == [task.pk]
    with pytest.raises(HomeTask.DoesNotExist):
        task_for(stranger, task.pk)  # only the person's own
    assert task_for(owner, task.pk).state == "PENDING"
    HomeTask.objects.filter(pk=task.pk).update(created_at=timezone.now() - timedelta(minutes=1))
    assert desired_state(home).home_tasks == []
    failed = task_for(owner, task.pk)
    assert failed.state == "FAILED" and failed.finished_at is not None
    assert failed.reason == (
        "gpu-a did not answer in time. Try again; if it keeps happening, the node may be down."
    )


def test_the_desired_state_lists_only_this_nodes_pending_tasks(
    register_node, owner, stranger, profile
):
    here = mig_node(register_node, "gpu-a")
    ended_desktop(owner, profile)
    mine = start_task(owner, "delete", "a.txt")
    done = start_task(owner, "list")
    do_home_report(here, done.pk, {"ok": True})
    Node.objects.filter(pk=here.pk).update(cordoned=True)  # the next desktop goes elsewhere
    there = mig_node(register_node, "gpu-b")
    ended_desktop(stranger, profile)
    theirs = start_task(stranger, "list")
    assert theirs.node == there
    listed = desired_state(here).home_tasks
    assert [t.model_dump() for t in listed] == [
        {"id": mine.pk, "kind": "delete", "home_volume": home_volume_of(owner), "path": "a.txt"},
    ]
    assert [t.id for t in desired_state(there).home_tasks] == [theirs.pk]


def test_old_tasks_are_forgotten_when_a_task_starts(home, owner):
    old = start_task(owner, "list")
    older = start_task(owner, "list")
    HomeTask.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(minutes=11))
    HomeTask.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(days=2))
    start_task(owner, "list")
    assert not HomeTask.objects.filter(pk=older.pk).exists()
    assert HomeTask.objects.filter(pk=old.pk).exists()


def test_a_running_desktop_wins_over_where_the_last_one_ran(register_node, owner, profile):
    first = mig_node(register_node, "gpu-a")
    ended_desktop(owner, profile)
    Node.objects.filter(pk=first.pk).update(cordoned=True)
    second = mig_node(register_node, "gpu-b")
    desktop = running_desktop(owner, profile)
    assert desktop.node == second and desktop.state == SessionState.RUNNING
    assert files_place(owner).node == second


def test_a_nodes_desired_state_reads_every_home_quota_in_one_query(owner, stranger, profile, pool):
    """Each desktop carries its person's quota (theirs, else the default), and however many
    desktops the node runs, the quotas are one query (an agent's wait/ answers with them all
    at a class start)."""
    Quota.objects.create(scope="user", key="*", max_home_mb=500)
    Quota.objects.create(scope="user", key="ada", max_home_mb=2000)
    sessions = [run_desktop(owner, profile), run_desktop(stranger, profile)]
    assert sessions[0].node == sessions[1].node  # the pool's one node
    with CaptureQueriesContext(connection) as queries:
        desired = desired_state(sessions[0].node).sessions
    assert {d.session_id: d.home_quota_mb for d in desired} == {
        sessions[0].pk: 2000,
        sessions[1].pk: 500,
    }
    quota_reads = [q for q in queries.captured_queries if "scheduling_quota" in q["sql"]]
    assert len(quota_reads) == 1, quota_reads
