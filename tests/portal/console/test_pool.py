"""The console's pool page: nodes, GPUs and slices drawn; cordon, uncordon and drain with a
reason, audited; a drain's deadline requeues; join tokens shown once, bound, expiring, and
replacing a node only when made to."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.choices import AuditKind, SessionState
from scheduling.engine.reasons import Code
from scheduling.models import AuditEvent, JoinToken, Node, Session
from scheduling.services.agent_sessions import do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.health import do_sweep_silent_nodes
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_stop, do_submit
from tests.conftest import gpu_inventory, registration

pytestmark = pytest.mark.django_db

S = SessionState
POOL = "/console/pool/"
ACTION = "/console/pool/nodes/"
TOKENS = "/console/pool/tokens/"
REGISTER = "/api/agent/v1/register/"


@pytest.fixture
def admin(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def submit(user, profile) -> Session:
    return do_submit(user, check_submit(user, profile.pk, "hobby", None))


def test_the_page_and_its_fragment_draw_the_pool_for_admins(admin, pool, owner, profile):
    session = submit(owner, profile)
    do_scheduling_cycle()
    page = admin.get(POOL)
    assert page.status_code == 200
    html = page.content.decode()
    assert "node-1" in html and "NVIDIA A100-SXM4-80GB" in html
    # Each MIG instance drawn as a quarter... of what the profile table says, labelled.
    assert html.count('class="pool-seg') == 10
    assert "1g.10gb · held" in html and "1g.10gb · free" in html
    assert f'href="/sessions/{session.pk}/"' in html
    assert 'id="pool-config"' in html and "/console/pool/fragment/" in html
    fragment = admin.get("/console/pool/fragment/")
    assert fragment.status_code == 200
    assert fragment.content.decode().count('class="pool-seg') == 10
    assert "<html" not in fragment.content.decode()


def test_students_and_strangers_get_404_everywhere(owner, pool):
    do_create_join_token("gpu-q", actor="test")
    token = JoinToken.objects.get(hostname="gpu-q")
    student = Client()
    student.force_login(owner)
    for client in (Client(), student):
        assert client.post(f"/console/pool/tokens/{token.pk}/revoke/").status_code == 404
        assert client.get(POOL).status_code == 404
        assert client.get("/console/pool/fragment/").status_code == 404
        post = {"node": pool.pk, "action": "cordon", "reason": "x"}
        assert client.post(ACTION, post).status_code == 404
        assert client.post(TOKENS, {"hostname": "h", "hours": 24}).status_code == 404
    assert not Node.objects.get(pk=pool.pk).cordoned
    assert not JoinToken.objects.filter(hostname="h").exists()
    assert JoinToken.objects.get(pk=token.pk).revoked_at is None


def test_an_admin_rotates_a_nodes_gateway_key_with_a_reason(admin, pool):
    refused = admin.post(ACTION, {"node": pool.pk, "action": "rotate_key", "reason": ""})
    assert refused.status_code == 400
    assert Node.objects.get(pk=pool.pk).gateway_key_id == 1

    done = admin.post(ACTION, {"node": pool.pk, "action": "rotate_key", "reason": "key leaked"})
    assert done.status_code == 302
    assert Node.objects.get(pk=pool.pk).gateway_key_id == 2
    event = AuditEvent.objects.get(kind=AuditKind.NODE_GATEWAY_KEY_ROTATED, node_id=pool.pk)
    assert (event.actor, event.data) == ("user:root", {"old": 1, "new": 2, "reason": "key leaked"})
    assert "signs desktop tickets with a new key" in admin.get(POOL).content.decode()


def test_cordon_needs_a_reason_and_is_audited_with_before_and_after(admin, pool):
    refused = admin.post(ACTION, {"node": pool.pk, "action": "cordon", "reason": "  "})
    assert refused.status_code == 400
    assert "Say why" in refused.content.decode()
    assert not Node.objects.get(pk=pool.pk).cordoned

    done = admin.post(ACTION, {"node": pool.pk, "action": "cordon", "reason": "fan noise"})
    assert done.status_code == 302
    node = Node.objects.get(pk=pool.pk)
    assert (node.cordoned, node.cordon_reason) == (True, "fan noise")
    event = AuditEvent.objects.get(kind=AuditKind.NODE_CORDONED, node_id=pool.pk)
    assert event.actor == "user:root"
    assert event.data["reason"] == "fan noise"
    assert event.data["before"]["cordoned"] is False and event.data["after"]["cordoned"] is True
    assert "Cordoned because: fan noise" in admin.get(POOL).content.decode()

    admin.post(ACTION, {"node": pool.pk, "action": "uncordon", "reason": "fan replaced"})
    assert not Node.objects.get(pk=pool.pk).cordoned
    cleared = AuditEvent.objects.get(kind=AuditKind.NODE_CORDON_CLEARED, node_id=pool.pk)
    assert cleared.data["reason"] == "fan replaced"
    assert cleared.data["after"] == {"cordoned": False, "cordon_reason": ""}


def test_a_draining_node_gets_nothing_new_and_its_deadline_requeues_running_sessions(
    admin, owner, profile, register_node
):
    draining, _ = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=2)])
    running = submit(owner, profile)
    do_scheduling_cycle()
    do_report(draining, running.pk, {"state": "RUNNING", "port": 32000})

    answer = admin.post(
        ACTION,
        {"node": draining.pk, "action": "drain", "reason": "new driver", "deadline": "30"},
    )
    assert answer.status_code == 302
    node = Node.objects.get(pk=draining.pk)
    assert node.draining_since is not None and node.drain_reason == "new driver"
    assert node.drain_deadline is not None
    started = AuditEvent.objects.get(kind=AuditKind.NODE_CORDONED, node_id=node.pk)
    assert started.data["action"] == "drain" and started.data["reason"] == "new driver"
    assert started.data["before"]["draining_since"] is None

    # Given a free slice on the draining node, a new request is not placed there.
    waiting = submit(owner, profile)
    do_scheduling_cycle()
    assert Session.objects.get(pk=waiting.pk).state == S.QUEUED

    # Before the deadline the sweep leaves the running session alone...
    do_sweep_silent_nodes(timezone.now())
    assert Session.objects.get(pk=running.pk).state == S.RUNNING
    assert "Sessions still on it are requeued at" in admin.get(POOL).content.decode()

    # ... after it, the session goes back to the queue with its age, and the drain is done.
    later = node.drain_deadline + timedelta(seconds=1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat=later)  # the node still answers
    do_sweep_silent_nodes(later)
    requeued = Session.objects.get(pk=running.pk)
    assert requeued.state == S.QUEUED and requeued.node is None
    assert requeued.created_at == running.created_at
    assert requeued.reason_code == Code.NODE_DRAINED_REQUEUED
    assert "being emptied for maintenance" in requeued.reason
    moved = AuditEvent.objects.get(node_id=node.pk, data__action="drain_requeued")
    assert moved.data["sessions"] == [running.pk]
    assert AuditEvent.objects.filter(session_id=running.pk, data__to="QUEUED").exists()
    assert Node.objects.get(pk=node.pk).drained_at is not None
    assert "The drain is complete" in admin.get(POOL).content.decode()

    # Stopping the drain puts the node back: the waiting requests are placed on it.
    admin.post(ACTION, {"node": node.pk, "action": "undrain", "reason": "driver done"})
    do_scheduling_cycle()
    assert Session.objects.get(pk=waiting.pk).state == S.PLACED


def test_a_drain_that_waits_never_requeues_and_completes_when_the_sessions_end(
    admin, owner, profile, register_node
):
    node, _ = register_node("gpu-a01", [gpu_inventory("GPU-a", 0, mig_slices=1)])
    running = submit(owner, profile)
    do_scheduling_cycle()
    do_report(node, running.pk, {"state": "RUNNING", "port": 32000})
    admin.post(ACTION, {"node": node.pk, "action": "drain", "reason": "move", "deadline": "wait"})
    assert Node.objects.get(pk=node.pk).drain_deadline is None

    later = timezone.now() + timedelta(days=3)
    Node.objects.filter(pk=node.pk).update(last_heartbeat=later)  # the node still answers
    do_sweep_silent_nodes(later)
    assert Session.objects.get(pk=running.pk).state == S.RUNNING
    assert "Waiting for its sessions to end." in admin.get(POOL).content.decode()

    do_stop(owner, Session.objects.get(pk=running.pk))
    do_report(node, running.pk, {"state": "ENDED"})
    assert "The drain is complete" in admin.get(POOL).content.decode()


def test_a_node_cannot_be_drained_twice(admin, pool):
    admin.post(ACTION, {"node": pool.pk, "action": "drain", "reason": "a", "deadline": "wait"})
    again = admin.post(
        ACTION, {"node": pool.pk, "action": "drain", "reason": "b", "deadline": "wait"}
    )
    assert again.status_code == 400
    assert "already draining" in again.content.decode()
    assert Node.objects.get(pk=pool.pk).drain_reason == "a"


def test_a_join_token_is_shown_once_and_bound_to_its_hostname(admin):
    created = admin.post(TOKENS, {"hostname": "gpu-n01", "hours": 24})
    assert created.status_code == 200
    assert created["Cache-Control"] == "no-store"
    html = created.content.decode()
    plain = html.split('id="join-token" class="pool-copy" type="text" readonly value="')[1]
    plain = plain.split('"')[0]
    assert plain.startswith("dpj_")
    assert f"DESKPOOL_JOIN_TOKEN={plain}" in html
    listing = admin.get(POOL).content.decode()
    assert plain not in listing and "gpu-n01" in listing and "unused" in listing
    token = JoinToken.objects.get()
    assert timedelta(hours=23) < token.expires_at - timezone.now() <= timedelta(hours=24)
    event = AuditEvent.objects.get(kind=AuditKind.JOIN_TOKEN_CREATED)
    assert event.data["after"]["hostname"] == "gpu-n01" and event.actor == "user:root"

    other = registration("gpu-other", [gpu_inventory("GPU-o", 0, shares=2)], plain)
    refused = APIClient().post(REGISTER, other, format="json")
    assert refused.status_code == 401
    assert "is for the node gpu-n01" in refused.json()["detail"]

    body = registration("gpu-n01", [gpu_inventory("GPU-n", 0, shares=2)], plain)
    assert APIClient().post(REGISTER, body, format="json").status_code == 201
    assert "used by gpu-n01" in admin.get(POOL).content.decode()


def test_a_hostname_is_needed_unless_any_host_is_ticked(admin):
    refused = admin.post(TOKENS, {"hostname": "", "hours": 24})
    assert refused.status_code == 400
    assert "tick “any host”" in refused.content.decode()
    assert not JoinToken.objects.exists()
    assert admin.post(TOKENS, {"any_host": "on", "hours": 24}).status_code == 200
    assert JoinToken.objects.get().hostname == ""


def test_an_expired_join_token_is_refused_with_a_clear_message(admin):
    plain = do_create_join_token(
        "gpu-late", actor="test", expires_at=timezone.now() - timedelta(minutes=1)
    )
    body = registration("gpu-late", [gpu_inventory("GPU-l", 0, shares=2)], plain)
    refused = APIClient().post(REGISTER, body, format="json")
    assert refused.status_code == 401
    assert "expired" in refused.json()["detail"]
    assert not Node.objects.filter(hostname="gpu-late").exists()
    assert "expired" in admin.get(POOL).content.decode()


def test_a_revoked_token_is_refused(admin):
    plain = do_create_join_token("gpu-r", actor="test")
    token = JoinToken.objects.get()
    assert admin.post(f"/console/pool/tokens/{token.pk}/revoke/").status_code == 302
    body = registration("gpu-r", [gpu_inventory("GPU-r", 0, shares=2)], plain)
    assert APIClient().post(REGISTER, body, format="json").status_code == 401
    assert "revoked" in admin.get(POOL).content.decode()


def test_replacing_a_registered_node_needs_a_token_made_for_it(admin, pool):
    plain = do_create_join_token("", actor="test")  # any host, but no replacement
    body = registration("node-1", [gpu_inventory("GPU-z", 0, shares=2)], plain)
    refused = APIClient().post(REGISTER, body, format="json")
    assert refused.status_code == 401
    assert "already registered" in refused.json()["detail"]
    assert Node.objects.get(pk=pool.pk).token_hash == pool.token_hash

    without_host = admin.post(TOKENS, {"any_host": "on", "hours": 24, "may_replace": "on"})
    assert without_host.status_code == 400
    created = admin.post(TOKENS, {"hostname": "node-1", "hours": 24, "may_replace": "on"})
    assert created.status_code == 200
    assert "It may replace the node node-1" in created.content.decode()
    replacing = JoinToken.objects.get(may_replace=True)
    assert replacing.hostname == "node-1"
    html = created.content.decode()
    plain = html.split('id="join-token" class="pool-copy" type="text" readonly value="')[1]
    body["join_token"] = plain.split('"')[0]
    taken = APIClient().post(REGISTER, body, format="json")
    assert taken.status_code == 201
    assert Node.objects.get(pk=pool.pk).token_hash != pool.token_hash
