"""Course folders on the real Docker engine (docs/course-files.md): the agent pulls a course's
folder from the portal's own views (in process, PostgreSQL), checks it, and mounts it
read-only at /courses/<code> into the desktop of an enrolled student, cold started or a
claimed warm desktop; a student of another course has no such path. A new version of the
folder is pulled once, linking the files it had, and a version a desktop still mounts is kept.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.handlers.wsgi import WSGIHandler

import nodeagent
from nodeagent.course_files import CourseFolders
from nodeagent.portal_client import PortalClient
from nodeagent.reconcile import Reconciler
from nodeagent.runtime.course_mounts import (
    courses_root,
    current_copy,
    prepare_warm,
    release_orphans,
    release_warm,
    warm_folder,
)
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.home_mounts import mount_count

from ..conftest import gpu_inventory
from .conftest import desired_session, desired_warm

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
NOTES = b"Week 1: read chapter 2.\n"


def converge(reconciler: Reconciler, desired: list, warm: tuple = ()) -> None:  # type: ignore[type-arg]
    reconciler.step(desired, list(warm))
    assert reconciler.wait_idle(90), "reconcile actions did not finish"


def run(container, *command: str, user: str = "1000") -> tuple[int, str]:  # type: ignore[no-untyped-def]
    done = container.exec_run(list(command), user=user)
    return done.exit_code, done.output.decode(errors="replace")


@pytest.fixture
def portal(settings, tmp_path, make_user, register_node, profile):  # type: ignore[no-untyped-def]
    """cs101 (its folder holds notes.txt) with alice enrolled, art200 with bob; both run a
    desktop on the node; the node's agent client talks to this portal's views."""
    from people.models import Course
    from scheduling.choices import SessionState
    from scheduling.models import Session
    from scheduling.models.installation import installation_id
    from scheduling.services.course_files import check_upload, do_upload
    from scheduling.services.teaching import course_role

    settings.COURSE_FILES_ROOT = tmp_path / "portal-course-files"
    installation_id()  # made here: the desired state is read in a read-only snapshot
    teacher, alice, bob = make_user("prof"), make_user("alice"), make_user("bob")
    course = Course.objects.create(code="cs101", title="GPUs")
    course.instructors.add(teacher)
    course.students.add(alice)
    Course.objects.create(code="art200", title="Painting").students.add(bob)

    def upload(name: str, data: bytes) -> None:
        plan = check_upload(course_role(teacher, course), [SimpleUploadedFile(name, data)])
        do_upload(teacher, plan)

    upload("notes.txt", NOTES)
    node, token = register_node("gpu-1", [gpu_inventory("GPU-1", 0, mig_slices=2)])
    for user in (alice, bob):
        Session.objects.create(
            user=user, profile=profile, purpose="hobby", state=SessionState.RUNNING,
            node=node, vnc_password="pw345678",
        )  # fmt: skip
    client = PortalClient(
        "http://testserver", node_token=token, transport=httpx.WSGITransport(app=WSGIHandler())
    )
    return client, course, upload


def test_an_enrolled_students_desktops_see_the_folder_read_only_and_others_do_not(
    portal, docker_client, tiny_image, node_name, sessions_dir, fake_portal
) -> None:  # type: ignore[no-untyped-def]
    client, course, upload = portal
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )
    folders = CourseFolders(client, courses_root(sessions_dir), in_use=runtime.course_sources)
    wanted = {s.user: s for s in client.desired().sessions}
    assert [r.code for r in wanted["alice"].courses] == ["cs101"]
    assert wanted["bob"].courses == []
    folders.sync(list(wanted.values()))
    copy = current_copy(courses_root(sessions_dir), "", course.pk)
    assert copy is not None and (copy / "notes.txt").read_bytes() == NOTES

    reconciler = Reconciler(runtime, fake_portal)
    alice = desired_session(6101, image=tiny_image, user="alice")
    alice = alice.model_copy(update={"courses": wanted["alice"].courses})
    bob = desired_session(6102, image=tiny_image, user="bob", course="art200")
    converge(reconciler, [alice, bob])
    assert fake_portal.states(6101) == ["STARTING", "RUNNING"]
    containers = {
        c.labels["deskpool.user"]: c for c in runtime_containers(docker_client, node_name)
    }

    # Alice's desktop reads the file at the fixed path; writing there fails: read-only.
    assert run(containers["alice"], "cat", "/courses/cs101/notes.txt") == (0, NOTES.decode())
    code, output = run(containers["alice"], "sh", "-c", "echo x > /courses/cs101/new.txt", user="0")
    assert code != 0 and "Read-only file system" in output
    code, output = run(containers["alice"], "rm", "-f", "/courses/cs101/notes.txt", user="0")
    assert code != 0 and "Read-only file system" in output
    # Bob, of another course, has no such path.
    assert run(containers["bob"], "test", "-e", "/courses/cs101")[0] != 0

    # A new version: only the new file comes; notes.txt is linked, not fetched again; the
    # version Alice's running desktop mounts is kept beside it.
    upload("week2.txt", b"Week 2\n")
    folders.sync(client.desired().sessions)
    newer = current_copy(courses_root(sessions_dir), "", course.pk)
    assert newer is not None and newer != copy
    assert sorted(p.name for p in newer.iterdir()) == ["notes.txt", "week2.txt"]
    assert (newer / "notes.txt").stat().st_ino == (copy / "notes.txt").stat().st_ino
    assert (copy / "notes.txt").read_bytes() == NOTES  # still mounted: not pruned

    converge(reconciler, [])
    folders.prune(copy.parent)
    assert not copy.exists() and newer.is_dir()  # no desktop mounts the old one now


def runtime_containers(docker_client, node_name: str) -> list:  # type: ignore[no-untyped-def,type-arg]
    labels = ["deskpool.managed=true", f"deskpool.node={node_name}"]
    return docker_client.containers.list(all=True, filters={"label": labels})


def test_a_claimed_warm_desktop_gets_the_students_course_folder(
    portal, docker_client, tiny_image, node_name, sessions_dir, fake_portal
) -> None:  # type: ignore[no-untyped-def]
    client, course, _ = portal
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )
    folders = CourseFolders(client, courses_root(sessions_dir), in_use=runtime.course_sources)
    wanted = {s.user: s for s in client.desired().sessions}
    folders.sync(list(wanted.values()))
    reconciler = Reconciler(runtime, fake_portal)
    converge(reconciler, [], (desired_warm("cf-1", image=tiny_image),))
    [container] = runtime_containers(docker_client, node_name)
    assert run(container, "ls", "-A", "/courses") == (0, "")  # the empty mount point

    alice = desired_session(6201, image=tiny_image, user="alice", warm_key="cf-1")
    alice = alice.model_copy(update={"courses": wanted["alice"].courses})
    converge(reconciler, [alice])
    assert fake_portal.states(6201) == ["STARTING", "RUNNING"]
    assert run(container, "cat", "/courses/cs101/notes.txt") == (0, NOTES.decode())
    code, output = run(container, "sh", "-c", "echo x > /courses/cs101/new.txt", user="0")
    assert code != 0 and "Read-only file system" in output
    copy = current_copy(courses_root(sessions_dir), "", course.pk)
    assert copy is not None and copy in runtime.course_sources()

    # The session ends: its mounts go, then the folders; the node's copy stays.
    converge(reconciler, [])
    folder: Path = warm_folder(sessions_dir, "cf-1")
    assert not folder.exists() and mount_count(folder / "cs101") == 0
    assert (copy / "notes.txt").read_bytes() == NOTES


def test_the_file_manager_names_the_course_folders_in_the_sessions_language(
    docker_client, tiny_image, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """deskpool-start's course_bookmark, run in the tiny image against a /courses holding a
    folder: a GTK bookmark (Thunar's side pane) named in the locale's language, replacing its
    own line only; none where /courses is empty or absent."""
    script = (Path(nodeagent.__file__).parent / "images" / "files" / "deskpool-start").read_text()
    # course_bookmark and the helper it calls (has_entries: no program to list /courses).
    functions = [
        re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", script, re.S | re.M)
        for name in ("has_entries", "course_bookmark")
    ]
    assert all(functions)
    defined = "".join(f.group(0) for f in functions if f)
    (tmp_path / "courses" / "cs101").mkdir(parents=True)
    marks = "$HOME/.config/gtk-3.0/bookmarks"
    steps = (
        f"export HOME=/tmp/h; mkdir -p $HOME/.config/gtk-3.0; echo 'file:///data Data' >{marks}; "
        f"course_bookmark zh_CN.UTF-8; cat {marks}; echo --; "
        f"course_bookmark en_US.UTF-8; cat {marks}"
    )
    output = docker_client.containers.run(
        tiny_image, ["bash", "-c", defined + steps], entrypoint=[], remove=True,
        volumes={str(tmp_path / "courses"): {"bind": "/courses", "mode": "ro"}},
    )  # fmt: skip
    chinese, english = output.decode().split("--\n")
    assert chinese == "file:///data Data\nfile:///courses 课程文件\n"
    assert english == "file:///data Data\nfile:///courses Course files\n"
    empty = docker_client.containers.run(
        tiny_image,
        ["bash", "-c", defined + "HOME=/tmp/h; mkdir $HOME; course_bookmark; ls -A ~"],
        entrypoint=[], remove=True,
    )  # fmt: skip
    assert empty == b""


def test_the_course_folders_of_a_gone_warm_desktop_are_released(sessions_dir) -> None:  # type: ignore[no-untyped-def]
    """A warm desktop's /courses folder whose container is gone (removed by hand, a crash) is
    unmounted and deleted, but for one young enough to be a start in progress."""
    if os.geteuid() != 0:
        pytest.skip("bind mounts need root")
    gone, starting = prepare_warm(sessions_dir, "gone-1"), prepare_warm(sessions_dir, "new-1")
    (gone / "cs101").mkdir()
    old = time.time() - 3600
    os.utime(gone, (old, old))
    release_orphans(sessions_dir, {"kept-1"}, older_than_s=300)
    assert not gone.exists() and mount_count(gone) == 0
    assert starting.is_dir() and mount_count(starting) == 1
    release_warm(sessions_dir, "new-1")
    assert not starting.exists()
