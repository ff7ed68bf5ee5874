"""The live sockets' wire is defined once (nodeagent/gateway/codes.py) and the browser reads it
(issue 34, item 6; STYLE.md habit 12): one reconnecting socket module, no copies of the paths
or close codes in the pages' scripts, and the wire on every page that opens a socket."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from nodeagent.gateway.codes import live_wire
from tests.integration.stack import ROOT

SCRIPTS = ROOT / "static" / "deskpool"
SOCKET_MODULE = "live_socket.js"
TEMPLATES = ROOT / "templates"


def scripts() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(SCRIPTS.glob("*.js"))}


def test_no_script_holds_a_socket_path_or_a_close_code():
    for name, text in scripts().items():
        assert "/ws/" not in text, f"{name}: a socket path; read it from #live-wire"
        codes = re.findall(r"(?<![\w.#-])4[45]\d\d(?![\w.])", text)
        assert not codes, f"{name}: close codes {codes}; read them from #live-wire"


def test_only_the_socket_module_opens_a_websocket():
    openers = sorted(name for name, text in scripts().items() if "new WebSocket" in text)
    assert openers == [SOCKET_MODULE]


def test_no_script_hand_rolls_a_reconnect_loop():
    for name, text in scripts().items():
        if name == SOCKET_MODULE:
            continue
        assert not re.search(r"setTimeout\(\s*connect\b", text), name
        assert ".onclose" not in text, f"{name}: a socket's close is live_socket.js's to handle"


def test_every_script_that_imports_the_socket_module_is_loaded_as_a_module():
    importers = {
        name for name, text in scripts().items() if re.search(r"from \"\./live_socket\.js\"", text)
    }
    assert {"class.js", "console_queue.js", "quota.js", "session.js"} <= importers
    loaded = re.compile(
        r"<script(?P<attrs>[^>]*) src=\"\{% static 'deskpool/(?P<name>\w+\.js)' %\}\""
    )
    for template in TEMPLATES.rglob("*.html"):
        for match in loaded.finditer(template.read_text()):
            if match["name"] in importers:
                assert 'type="module"' in match["attrs"], f"{template.name}: {match['name']}"


@pytest.mark.django_db
def test_every_page_carries_the_wire_once(make_user):
    admin = make_user("root", is_staff=True)
    client = Client()
    client.force_login(admin)
    for path in ("/", "/console/queue/", "/console/alerts/", "/quota-requests/"):
        page = client.get(path).content.decode()
        assert page.count('id="live-wire"') == 1, path
        wire = page.split('<script id="live-wire" type="application/json">')[1].split("<")[0]
        assert json.loads(wire) == live_wire(), path
