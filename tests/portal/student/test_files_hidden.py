"""Issue 38, item 3 (Files): hidden files are hidden by default, shown with ``?hidden=1``
(a plain link, no JavaScript needed), and the portal's own files in a home (``.deskpool`` and
what it holds, an upload's temporary file) have no Delete button and cannot be deleted: the
service refuses with a sentence, and so does the node's agent (defence in depth)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from nodeagent.home_files import TEMP_PREFIX, HomeFileError, HomeFolder, portal_own
from scheduling.models import HomeTask, Node
from scheduling.services.home_files import FilesRefused, start_task
from scheduling.services.home_files_agent import do_home_report

pytestmark = [pytest.mark.django_db]

STAMP = datetime(2026, 12, 5, 1, 2, tzinfo=UTC).isoformat()
ENTRIES = [
    {"name": ".cache", "kind": "folder", "modified": STAMP},
    {"name": ".deskpool", "kind": "folder", "modified": STAMP},
    {"name": ".bashrc", "kind": "file", "size": 10, "modified": STAMP},
    {"name": "Aufgaben", "kind": "folder", "modified": STAMP},
    {"name": "notes.txt", "kind": "file", "size": 5, "modified": STAMP},
]
REFUSED = (
    "{name} holds the portal's own files for your desktops (such as when each one stopped): "
    "it cannot be deleted."
)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def home_node(pool) -> Node:
    Node.objects.filter(pk=pool.pk).update(home_root_shared=True, last_heartbeat=timezone.now())
    return Node.objects.get(pk=pool.pk)


def listing_html(client: Client, node: Node, query: str = "") -> tuple[str, str]:
    """The page (``/files/<query>``) and its listing's fragment once the node answered."""
    page = client.get(f"/files/{query}").content.decode()
    task = HomeTask.objects.filter(kind="list").latest("pk")
    assert do_home_report(node, task.pk, {"ok": True, "entries": ENTRIES}) == "DONE"
    found = re.search(r'"listing": "([^"]+)"', page)
    assert found, "no listing to poll"
    answer = client.get(found.group(1), HTTP_ACCEPT="application/json").json()
    return page, answer["html"]


def names_in(html: str) -> list[str]:
    return re.findall(r'<span class="files-name">(?:<a [^>]*>)?([^<]+?)/?(?:</a>)?</span>', html)


def test_hidden_files_are_left_out_by_default_with_a_link_to_show_them(owner, home_node):
    page, html = listing_html(signed_in(owner), home_node)
    assert names_in(html) == ["Aufgaben", "notes.txt"]
    assert "3 hidden files or folders not shown." in html
    assert '<a id="files-hidden-toggle" href="/files/?hidden=1">Show hidden files</a>' in page


def test_with_hidden_1_they_are_shown_and_the_portals_own_has_no_delete(owner, home_node):
    page, html = listing_html(signed_in(owner), home_node, "?hidden=1")
    assert names_in(html) == [".cache", ".deskpool", "Aufgaben", ".bashrc", "notes.txt"]
    assert '<a id="files-hidden-toggle" href="/files/">Hide hidden files</a>' in page
    assert '<a href="/files/?path=.cache&amp;hidden=1">.cache/</a>' in html
    own = re.search(r"files-folder\">.*?\.deskpool/.*?</li>", html, re.S)
    assert own and "files-delete" not in own.group(0) and "(kept by the portal)" in own.group(0)
    assert html.count('action="/files/delete/"') == 4  # every entry but .deskpool
    assert "hidden files or folders not shown" not in html


def test_the_service_refuses_to_delete_the_portals_own_files(owner, home_node):
    for path in (".deskpool", ".deskpool/stopped-at", f"notes/{TEMP_PREFIX}x1"):
        with pytest.raises(FilesRefused) as refused:
            start_task(owner, "delete", path)
        assert refused.value.message == REFUSED.format(name=path)
    assert not HomeTask.objects.exists()
    assert start_task(owner, "delete", ".deskpool-notes").kind == "delete"  # only its own


def test_the_delete_form_refuses_before_asking(owner, home_node):
    client = signed_in(owner)
    response = client.post("/files/delete/", {"path": ".deskpool", "confirmed": "1"})
    assert response.status_code == 400
    assert escape(REFUSED.format(name=".deskpool")) in response.content.decode()
    asked = client.post("/files/delete/", {"path": ".deskpool/stopped-at"})
    assert asked.status_code == 400 and "from your home folder?" not in asked.content.decode()
    assert not HomeTask.objects.filter(kind="delete").exists()


def test_the_refusal_in_chinese(owner, home_node):
    """Needs the zh-Hans catalogue entry for the sentence (issue 38's catalogue update)."""
    client = signed_in(owner)
    html = client.post(
        "/files/delete/", {"path": ".deskpool"}, HTTP_ACCEPT_LANGUAGE="zh-Hans"
    ).content.decode()
    assert "门户自己的文件" in html


def test_the_agent_refuses_too(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".deskpool").mkdir(parents=True)
    (home / ".deskpool" / "stopped-at").write_text("2026-12-05T01:02:00Z session 7\n")
    (home / f"{TEMP_PREFIX}abc").write_text("half")
    with HomeFolder.open(home) as folder:
        for path in (".deskpool", ".deskpool/stopped-at", f"{TEMP_PREFIX}abc"):
            with pytest.raises(HomeFileError, match="portal's own files"):
                folder.delete(path)
    assert (home / ".deskpool" / "stopped-at").exists() and (home / f"{TEMP_PREFIX}abc").exists()


def test_what_counts_as_the_portals_own():
    assert portal_own(".deskpool") and portal_own(".deskpool/a/b")
    assert portal_own(f"x/{TEMP_PREFIX}1")
    assert not portal_own("") and not portal_own("x/.deskpool") and not portal_own(".deskpoolx")
