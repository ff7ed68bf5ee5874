"""Fixtures shared by the portal and scheduling tests: people, profiles and a small pool.

These tests run on the real PostgreSQL and Redis named by DATABASE_URL and REDIS_URL
(``make test`` points them at the local services).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TEST_IMAGE = "deskpool/tiny:latest"


# The pool-wide figures a submit reads are read afresh every time in tests (the servers the
# tests start inherit this), so that a test's change shows at once; tests/scheduling/
# test_recent_reads.py turns the keeping on.
os.environ.setdefault("DESKPOOL_POOL_READ_KEEP_S", "0")


def pytest_configure(config) -> None:
    os.makedirs("test-output", exist_ok=True)
    from django.conf import settings

    settings.POOL_READ_KEEP_S = float(os.environ["DESKPOOL_POOL_READ_KEEP_S"])


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix) -> None:
    """A test database of this pytest run's own (``test_<name>_<pid>``): two runs at once on
    one PostgreSQL (two engineers, or a run beside a benchmark) no longer drop each other's."""
    from django.conf import settings

    for alias in settings.DATABASES:
        database = settings.DATABASES[alias]
        if database["ENGINE"].endswith("sqlite3"):
            continue
        test = database.setdefault("TEST", {})
        test["NAME"] = f"test_{database['NAME']}_{os.getpid()}"


@pytest.fixture(scope="session", autouse=True)
def _clean_redis():
    """Start from an empty Redis database: no stale Celery messages or locks."""
    from django.conf import settings

    if settings.EMBEDDED:
        yield
        return
    import redis

    for url in (settings.CELERY_BROKER_URL, settings.LOCK_REDIS_URL):
        redis.Redis.from_url(url).flushdb()
    yield


@pytest.fixture
def make_user(db):
    from django.contrib.auth import get_user_model

    def make(username: str, **fields):
        user = get_user_model().objects.create_user(username, password="pw-" + username, **fields)
        return user

    return make


@pytest.fixture
def owner(make_user):
    return make_user("ada")


def give_thesis_grant(user) -> None:
    """Give a person thesis status, as their advisor would: an active grant for 30 days.
    Thesis requests need one, at submit and again at placement (docs/people.md)."""
    from datetime import timedelta

    from django.utils import timezone

    from people.models import ThesisGrant

    ThesisGrant.objects.create(
        student=user, until=timezone.localdate() + timedelta(days=30), note="test"
    )


@pytest.fixture
def grant_thesis(db):
    def grant(*users):
        for user in users:
            give_thesis_grant(user)

    return grant


@pytest.fixture
def stranger(make_user):
    return make_user("ben")


@pytest.fixture
def admin_user(make_user):
    return make_user("root", is_staff=True, is_superuser=True)


@pytest.fixture
def profile(db):
    from scheduling.models import DesktopProfile

    return DesktopProfile.objects.create(
        slug="painting",
        name="AI painting",
        image=TEST_IMAGE,
        cpus=0.5,
        memory_mb=512,
        gpu_count=1,
        gpu_memory_min_mb=4000,
        allowed_kinds=["mig", "share"],
        pids_limit=256,
        shm_mb=64,
    )


def gpu_inventory(uuid: str, index: int, *, mig_slices: int = 0, shares: int = 0) -> dict:
    """One GPU as an agent reports it (simulated): MIG instances or time-sliced shares."""
    mig = [
        {"uuid": f"MIG-{uuid}-{slot}", "profile": "1g.10gb", "memory_mb": 9984}
        for slot in range(mig_slices)
    ]
    gpu = {
        "uuid": uuid,
        "index": index,
        "name": "NVIDIA A100-SXM4-80GB" if mig_slices else "Tesla T4",
        "memory_mb": 81920 if mig_slices else 15360,
        "compute_capability": "8.0" if mig_slices else "7.5",
        "mig_mode": bool(mig_slices),
        "mig_instances": mig,
        "nvlink_peers": [],
        "pci_bus_id": f"00000000:{index:02x}:00.0",
        "sharing": "mig" if mig_slices else "share",
        "simulated": True,
    }
    if shares:
        gpu.update(share_count=shares, share_memory_mb=15360 // shares)
    return gpu


def registration(hostname: str, gpus: list[dict], join_token: str | None = None) -> dict:
    from nodeagent.protocol import AGENT_VERSION, PROTOCOL_VERSION

    body = {
        "protocol_version": PROTOCOL_VERSION,
        "agent_version": AGENT_VERSION,
        "hostname": hostname,
        "address": "127.0.0.1",
        "cpu_count": 64,
        "memory_mb": 262144,
        "labels": {"rack": "r1"},
        "runtime": "simulated",
        "gpus": gpus,
    }
    if join_token:
        body["join_token"] = join_token
    return body


@pytest.fixture
def register_node(db):
    """Register a node through the service the agent API uses; returns (node, node token)."""
    from scheduling.services.nodes import do_create_join_token, do_register

    def register(hostname: str, gpus: list[dict]):
        token = do_create_join_token(hostname, actor="test")
        return do_register(registration(hostname, gpus, token), None)

    return register


@pytest.fixture
def pool(register_node):
    """Ten slices: one node with 2 MIG GPUs × 4 instances and 1 T4 with 2 shares."""
    node, token = register_node(
        "node-1",
        [
            gpu_inventory("GPU-a", 0, mig_slices=4),
            gpu_inventory("GPU-b", 1, mig_slices=4),
            gpu_inventory("GPU-c", 2, shares=2),
        ],
    )
    return node


@pytest.fixture(autouse=True)
def _fresh_installation_id():
    """Each test's database is another installation: the id the portal read once (homes'
    names carry it) is read again, from this test's database."""
    from scheduling.models.installation import forget_installation_id

    forget_installation_id()
    yield
    forget_installation_id()


@pytest.fixture(scope="session", autouse=True)
def _no_warm_home_mounts_left(tmp_path_factory):
    """Warm desktops' homes are bind mounts under a test's tmp folder; an agent killed by a
    test leaves them mounted. Unmount them at the end, so that pytest's later clean-up of old
    tmp folders never deletes through one."""
    yield
    from nodeagent.runtime import home_mounts

    base = str(tmp_path_factory.getbasetemp())
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        # and course folders (docs/course-files.md): warm desktops' and the node copies
        # sealed read-only for them; the deepest first
        points = {
            line.split(" ")[4]
            for line in f
            if any(part in line for part in ("/warm-homes/", "/warm-courses/", "/courses/"))
        }
    for point in sorted(points, reverse=True):
        if point.startswith(base):
            home_mounts.release(Path(point))


@pytest.fixture(scope="session", autouse=True)
def _no_home_images_left_mounted(tmp_path_factory):
    """Home images (nodeagent/runtime/home_images.py: the loop-mounted ext4 homes an agent
    makes) stay mounted while their agent runs; one a test left behind (an agent killed, a
    stack not closed) is unmounted at the end, so that no loop device outlives the tests and
    pytest's clean-up never deletes through a mount. tests/nodeagent/test_home_quota.py
    checks after each of its tests that no loop device of it is left."""
    yield
    from nodeagent.runtime import home_images

    home_images.release_all(tmp_path_factory.getbasetemp())


@pytest.fixture
def smtp_inbox():
    """A real SMTP server (aiosmtpd) on 127.0.0.1 with Django's SMTP backend pointed at it;
    yields the server's inbox: ``.messages`` holds every message it accepted."""
    import socket

    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message
    from django.test import override_settings

    class Inbox(Message):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list = []

        def handle_message(self, message) -> None:
            self.messages.append(message)

    inbox = Inbox()
    with socket.socket() as probe:  # a free port for the server
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        with override_settings(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=port,
            EMAIL_USE_TLS=False,
            EMAIL_HOST_USER="",
            EMAIL_HOST_PASSWORD="",
        ):
            yield inbox
    finally:
        controller.stop()


# -- the desktop gateway (issue 34): a node with one, a desktop running there, a sign-in -----

GATEWAY_PORT = 6090


def sign_in(user) -> str:
    """A real login session of ``user``; its key."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    key = client.session.session_key
    assert key is not None
    return key


@pytest.fixture
def gateway_registration(db):
    """A node registered with its gateway's port, as an agent with a gateway registers; and
    its node token."""
    from scheduling.services.nodes import do_create_join_token, do_register

    body = registration("gw-1", [gpu_inventory("GPU-gw", 0, mig_slices=2)])
    body |= {"join_token": do_create_join_token("gw-1", actor="test"), "gateway_port": GATEWAY_PORT}
    node, token = do_register(body, None)
    assert token is not None
    return node, token


@pytest.fixture
def gateway_node(gateway_registration):
    from scheduling.models import Node

    return Node.objects.get(pk=gateway_registration[0].pk)


@pytest.fixture
def gateway_desktop(gateway_node, owner, profile):
    """The owner's desktop, running on the gateway node, with sound."""
    from scheduling.choices import SessionState
    from scheduling.models import Session

    return Session.objects.create(
        user=owner,
        profile=profile,
        purpose="hobby",
        state=SessionState.RUNNING,
        node=gateway_node,
        desktop_host=gateway_node.address,
        desktop_port=5901,
        desktop_audio_port=6081,
        vnc_password="pw345678",
    )
