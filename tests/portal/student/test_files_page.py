"""The Files page (issue 27) as the server renders it: where the home is (or why none), the
quota, the folder's listing from a home task (rendered in the reader's time zone and
language), the delete form that starts a task, the upload and download that go to the
node's gateway with a ticket, refusals as 400 with their sentence, another person's task 404,
and no content route left for a task's bytes. The browser's side:
tests/e2e/test_files_browser.py."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from people.preferences import save_preferences
from scheduling.models import HomeTask, HomeUsage, Node
from scheduling.services.home_files_agent import do_home_report
from tests.conftest import GATEWAY_PORT

pytestmark = [pytest.mark.django_db]

ZONE = "Asia/Kathmandu"  # UTC+05:45: a time shown in UTC would not match
MODIFIED = datetime(2026, 12, 5, 1, 2, tzinfo=UTC)  # 06:47 in Kathmandu


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def home_node(pool) -> Node:
    """node-1 shares homes and answers: everybody's Files page asks it."""
    Node.objects.filter(pk=pool.pk).update(home_root_shared=True, last_heartbeat=timezone.now())
    return Node.objects.get(pk=pool.pk)


def config_of(html: str) -> dict:
    found = re.search(r'<script id="files-config" type="application/json">(.*?)</script>', html)
    assert found, "no files config"
    return json.loads(found.group(1))


def task_json(client: Client, task: HomeTask) -> dict:
    response = client.get(f"/files/tasks/{task.pk}/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


def listed(node: Node, task: HomeTask, entries: list[dict], **report) -> None:
    assert do_home_report(node, task.pk, {"ok": True, "entries": entries, **report}) == "DONE"


def test_without_a_home_the_page_says_why_and_what_to_do(owner):
    response = signed_in(owner).get("/files/")
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'<p id="files-place" class="notice">Your home folder is made when', html)
    assert "Start a desktop, then come back to add files." in html
    assert "files-upload-form" not in html and "files-listing" not in html
    assert not HomeTask.objects.exists()
    assert '<a href="/files/" aria-current="page">Files</a>' in html  # the navigation's entry


def test_signed_out_people_go_to_the_login_page():
    response = Client().get("/files/")
    assert response.status_code == 302 and response.url.startswith("/login/")


def test_no_quota_line_before_the_home_was_ever_measured(owner, home_node):
    html = signed_in(owner).get("/files/").content.decode()
    assert "files-meter" not in html and "measured" not in html


def test_a_done_listing_renders_folders_first_in_the_persons_zone(owner, home_node):
    save_preferences(owner, time_zone=ZONE)
    client = signed_in(owner)
    client.get("/files/")
    task = HomeTask.objects.get(user=owner)
    assert task_json(client, task)["state"] == "PENDING"
    stamp = MODIFIED.isoformat()
    listed(
        home_node,
        task,
        [
            {"name": "zeta.txt", "kind": "file", "size": 2048, "modified": stamp},
            {"name": "<b>x</b>.py", "kind": "file", "size": 5, "modified": stamp},
            {"name": "Aufgaben", "kind": "folder", "modified": stamp},
            {"name": "latest", "kind": "link", "modified": stamp},
        ],
    )
    answer = task_json(client, task)
    assert answer["state"] == "DONE" and answer["kind"] == "list"
    html = answer["html"]
    names = re.findall(r'class="files-entry files-(\w+)"', html)
    assert names == ["folder", "file", "link", "file"]  # folders first, then by name
    assert '<a href="/files/?path=Aufgaben">Aufgaben/</a>' in html
    assert "&lt;b&gt;x&lt;/b&gt;.py" in html and "<b>x</b>" not in html
    assert '<time datetime="2026-12-05T06:47:00+05:45">2026-12-05 06:47</time>' in html
    assert "2.0\xa0KB" in html
    # Files: Download and Delete (asked first); links: no action.
    assert html.count('action="/files/download/"') == 2
    assert html.count('action="/files/delete/"') == 3
    assert 'data-confirm="Delete zeta.txt from your home folder?' in html
    link = re.search(r'files-link">.*?</li>', html, re.S)
    assert link and "<form" not in link.group(0)
    assert "csrfmiddlewaretoken" in html
    # Without JavaScript, the task's own page shows the same listing.
    page = client.get(f"/files/tasks/{task.pk}/").content.decode()
    assert "Aufgaben/" in page and 'http-equiv="refresh"' not in page


def test_a_truncated_listing_says_only_the_first_are_shown(owner, home_node):
    client = signed_in(owner)
    client.get("/files/")
    task = HomeTask.objects.get(user=owner)
    entry = {"name": "a", "kind": "file", "size": 1, "modified": MODIFIED.isoformat()}
    listed(home_node, task, [entry], truncated=True)
    assert "only the first 1000 entries are shown" in task_json(client, task)["html"]


def test_a_failed_listing_shows_its_reason_and_try_again(owner, home_node):
    client = signed_in(owner)
    client.get("/files/?path=gone")
    task = HomeTask.objects.get(user=owner)
    do_home_report(home_node, task.pk, {"ok": False, "reason": "No folder named gone."})
    answer = task_json(client, task)
    assert answer["state"] == "FAILED"
    assert "No folder named gone." in answer["html"]
    assert '<a href="/files/?path=gone">Try again</a>' in answer["html"]


def test_a_tasks_bytes_are_served_no_more(owner, home_node):
    """Downloads go through the node's gateway: the old content route is gone."""
    client = signed_in(owner)
    client.get("/files/")
    task = HomeTask.objects.get(user=owner)
    assert client.get(f"/files/tasks/{task.pk}/content/").status_code == 404


def test_another_persons_task_is_404(owner, stranger, home_node):
    signed_in(owner).get("/files/")
    task = HomeTask.objects.get(user=owner)
    other = signed_in(stranger)
    assert other.get(f"/files/tasks/{task.pk}/", HTTP_ACCEPT="application/json").status_code == 404
    assert other.get(f"/files/?task={task.pk}").status_code == 404
    assert other.get("/files/?task=abc").status_code == 404


def test_without_a_node_an_upload_is_refused_with_the_notice(owner):
    data = SimpleUploadedFile("a.txt", b"a")
    response = signed_in(owner).post("/files/upload/", {"file": data})
    assert response.status_code == 400
    assert "Start a desktop, then come back to add files." in response.content.decode()


def test_posts_need_the_csrf_token(owner, home_node):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post("/files/download/", {"path": "a.txt"}).status_code == 403
    assert client.post("/files/delete/", {"path": "a.txt", "confirmed": "1"}).status_code == 403
    assert not HomeTask.objects.exists()


def test_delete_asks_first_then_starts_a_delete_task(owner, home_node):
    client = signed_in(owner)
    asked = client.post("/files/delete/", {"path": "notes/old.txt"})
    assert asked.status_code == 200
    html = asked.content.decode()
    assert "Delete old.txt from your home folder?" in html
    assert '<a class="button" href="/files/?path=notes">' in html
    assert not HomeTask.objects.exists()
    response = client.post("/files/delete/", {"path": "notes/old.txt", "confirmed": "1"})
    task = HomeTask.objects.get(user=owner, kind="delete")
    assert task.path == "notes/old.txt"
    assert response.url == f"/files/?path=notes&task={task.pk}"
    do_home_report(home_node, task.pk, {"ok": False, "reason": "No file named old.txt."})
    html = client.get(response.url).content.decode()
    assert "No file named old.txt." in html


def test_the_page_in_chinese(owner, home_node):
    HomeUsage.objects.create(user=owner, used_bytes=1024**3, node_hostname="node-1")
    client = signed_in(owner)
    html = client.get("/files/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()
    assert '<html lang="zh-hans">' in html
    assert "Files" not in re.sub(r"<script.*?</script>|<[^>]+>", "", html, flags=re.S).replace(
        "Deskpool", ""
    ), "an English word left"
    client.get("/files/", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    task = HomeTask.objects.filter(user=owner).latest("pk")
    listed(
        home_node,
        task,
        [{"name": "a.txt", "kind": "file", "size": 1, "modified": MODIFIED.isoformat()}],
    )
    answer = client.get(
        f"/files/tasks/{task.pk}/", HTTP_ACCEPT="application/json", HTTP_ACCEPT_LANGUAGE="zh-Hans"
    ).json()
    assert "下载" in answer["html"] and "删除" in answer["html"]
    assert "2026年12月5日" in answer["html"]


def test_the_desktop_drawer_links_to_the_files_page_and_uploads(owner, profile, pool):
    from tests.portal.student.test_limit_pages import desktop_page
    from tests.scheduling.test_lifecycle import run_desktop

    session = run_desktop(owner, profile)
    html = desktop_page(signed_in(owner), session)
    assert re.search(r'<a id="drawer-files" href="/files/" target="_blank" rel="noopener">', html)
    # Without a script, the drawer's upload form posts to the Files page in a new tab.
    assert re.search(
        r'<form id="drawer-upload" class="drawer-upload" method="post" action="/files/upload/" '
        r'enctype="multipart/form-data" target="_blank">',
        html,
    )
    # No fixed cap: an upload is bounded by the home's quota only (the gateway holds it).
    assert "up to the room your quota leaves: the desktop sees it at once." in html
    # (The page's scripts are left out: its one-time tokens are random letters.)
    assert "MB" not in re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)


def test_a_refused_download_is_a_page_in_the_persons_language(owner, home_node):
    """No running desktop to carry it: the folder's page says why (400), not JSON."""
    response = signed_in(owner).post(
        "/files/download/", {"path": "notes/a.txt"}, HTTP_ACCEPT_LANGUAGE="zh-Hans"
    )
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert '<html lang="zh-hans">' in html
    assert "上传和下载经由你正在运行的桌面所在的节点进行。请先启动一个桌面，然后重试。" in html
    assert "Uploads and downloads" not in html


def test_a_download_goes_to_the_gateway_with_a_single_use_ticket(gateway_desktop, owner):
    response = signed_in(owner).post("/files/download/", {"path": "notes/a.txt"})
    assert response.status_code == 303
    assert response["Location"].startswith(
        f"http://127.0.0.1:{GATEWAY_PORT}/files/download?ticket="
    )


def test_the_page_may_send_uploads_and_download_forms_to_the_gateway(gateway_desktop, owner):
    """The upload is a PUT to the gateway and the download form's 303 goes there (a form's
    redirect is held to form-action too)."""
    policy = signed_in(owner).get("/files/")["Content-Security-Policy"]
    directives = {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.split()}
    gateway = f"http://127.0.0.1:{GATEWAY_PORT}"
    assert gateway in directives["connect-src"] and gateway in directives["form-action"]
