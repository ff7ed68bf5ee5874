"""Desktops are sealed off from each other and from the host (issue 14, finding 2).

Two real desktops started by the agent's Docker runtime (the tiny image): a session's and a
warm one, on the node's own desktop network. From inside the first, a TCP connect (bash's
``/dev/tcp``) must not reach the second's websockify or VNC port, nor a port listening on
the host's bridge gateway; the same connect from the first to its own websockify, and from
the host to the gateway listener, show the probe and the listener work. The published port
is bound to the management address only. Another host (a network namespace on a veth pair)
is reachable from a desktop until its address is among the node's blocked networks.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.config import AgentConfig, ConfigError
from nodeagent.desktop_audio import DESKTOP_AUDIO_PORT
from nodeagent.protocol import DESKTOP_WEBSOCKIFY_PORT
from nodeagent.runtime.desktop_network import (
    FORWARD_CHAIN,
    bridge_name,
    network_name,
    portal_addresses,
)
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.conftest import (  # noqa: F401 - fixtures
    desired_session,
    desired_warm,
    docker_client,
    node_name,
    tiny_image,
)

VNC_PORT = 5901  # Xvnc inside the desktop (nodeagent/images/files/deskpool-start)
PROBE_S = "3"  # the probe's own limit: a dropped SYN is never answered


def reaches(container, host: str, port: int) -> bool:  # type: ignore[no-untyped-def]
    """Does a TCP connect from inside the container to host:port succeed?"""
    probe = f"exec 3<>/dev/tcp/{host}/{port}"
    result = container.exec_run(["timeout", PROBE_S, "bash", "-c", probe])
    return result.exit_code == 0


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on every address of the host, accepting (and closing) connections."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.mark.docker
def test_desktops_reach_neither_each_other_nor_the_host(
    docker_client,  # noqa: F811
    tiny_image,  # noqa: F811
    node_name,  # noqa: F811
    tmp_path: Path,
    listener: int,
) -> None:  # type: ignore[no-untyped-def]
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=tmp_path, ready_timeout_s=30
    )
    mine = runtime.start(desired_session(9301, image=tiny_image))
    warm = runtime.start_warm(desired_warm("iso-1", image=tiny_image))
    network = network_name(node_name)
    first = docker_client.containers.get(mine.container_id)
    second = docker_client.containers.get(warm.container_id)
    settings = second.attrs["NetworkSettings"]["Networks"]
    assert list(settings) == [network]  # not the default bridge
    other, gateway = settings[network]["IPAddress"], settings[network]["Gateway"]

    # The probe works: the desktop reaches its own websockify, the host its gateway listener.
    assert reaches(first, "127.0.0.1", DESKTOP_WEBSOCKIFY_PORT)
    socket.create_connection((gateway, listener), timeout=5).close()

    assert not reaches(first, other, DESKTOP_WEBSOCKIFY_PORT)
    assert not reaches(first, other, VNC_PORT)
    assert not reaches(second, first.attrs["NetworkSettings"]["Networks"][network]["IPAddress"],
                       DESKTOP_WEBSOCKIFY_PORT)  # fmt: skip
    assert not reaches(first, gateway, listener)
    # No IPv6 inside: link-local addresses would pass the engine's (IPv4) ICC rule.
    assert first.exec_run(["cat", "/proc/net/if_inet6"]).output == b""

    attrs = docker_client.networks.get(network).attrs
    assert attrs["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    assert attrs["Options"]["com.docker.network.bridge.name"] == bridge_name(network)
    assert not attrs["Internal"]  # outbound traffic stays open


@pytest.mark.docker
def test_the_published_port_is_bound_to_the_management_address_only(
    docker_client,  # noqa: F811
    tiny_image,  # noqa: F811
    node_name,  # noqa: F811
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    assert AgentConfig(node_name="n").publish_address == "127.0.0.1"  # the default
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=tmp_path, ready_timeout_s=30
    )
    started = runtime.start(desired_session(9302, image=tiny_image))
    container = docker_client.containers.get(started.container_id)
    ports = container.attrs["NetworkSettings"]["Ports"]
    bindings = ports[f"{DESKTOP_WEBSOCKIFY_PORT}/tcp"]
    assert {b["HostIp"] for b in bindings} == {"127.0.0.1"}
    assert started.host == "127.0.0.1" and started.port == int(bindings[0]["HostPort"])
    # The sound's port too (published for every desktop; the tiny image serves none).
    assert {b["HostIp"] for b in ports[f"{DESKTOP_AUDIO_PORT}/tcp"]} == {"127.0.0.1"}
    # Nothing else is published.
    assert sorted(p for p, b in ports.items() if b) == sorted(
        [f"{DESKTOP_WEBSOCKIFY_PORT}/tcp", f"{DESKTOP_AUDIO_PORT}/tcp"]
    )


REMOTE_SERVER = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
while True:
    server.accept()[0].close()
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def remote_host() -> Iterator[tuple[str, int]]:
    """Another host: a network namespace behind a veth pair, listening on a TCP port."""
    tag = uuid.uuid4().hex[:6]
    netns, host_side, remote_side = f"dp-iso-{tag}", f"dpi{tag}h", f"dpi{tag}r"
    subnet = f"10.232.{int(tag, 16) % 250 + 1}"
    server = None
    try:
        _ip("netns", "add", netns)
        _ip("link", "add", host_side, "type", "veth", "peer", "name", remote_side)
        _ip("link", "set", remote_side, "netns", netns)
        _ip("addr", "add", f"{subnet}.1/30", "dev", host_side)
        _ip("link", "set", host_side, "up")
        _ip("-n", netns, "addr", "add", f"{subnet}.2/30", "dev", remote_side)
        _ip("-n", netns, "link", "set", remote_side, "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", REMOTE_SERVER, f"{subnet}.2"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None
        yield f"{subnet}.2", int(server.stdout.readline())
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", host_side], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


@pytest.mark.docker
def test_desktops_do_not_reach_the_networks_the_node_blocks(
    docker_client,  # noqa: F811
    tiny_image,  # noqa: F811
    node_name,  # noqa: F811
    tmp_path: Path,
    remote_host: tuple[str, int],
) -> None:  # type: ignore[no-untyped-def]
    address, port = remote_host
    open_runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=tmp_path / "a", ready_timeout_s=30
    )
    started = open_runtime.start(desired_session(9303, image=tiny_image))
    desktop = docker_client.containers.get(started.container_id)
    assert reaches(desktop, address, port)  # forwarded out, like to any other host

    blocked = f"{address}/32"
    rule = ["-d", blocked, "-j", "REJECT", "--reject-with", "icmp-port-unreachable"]
    try:
        guarded = DockerRuntime(
            docker_client,
            node_name=node_name,
            sessions_dir=tmp_path / "b",
            ready_timeout_s=30,
            blocked_networks=[blocked],
        )
        other = guarded.start(desired_session(9304, image=tiny_image))
        assert not reaches(docker_client.containers.get(other.container_id), address, port)
        assert not reaches(desktop, address, port)
    finally:
        subprocess.run(["iptables", "-w", "5", "-D", FORWARD_CHAIN, *rule], check=False)


def test_blocked_networks_come_from_the_environment_and_the_portal_url() -> None:
    config = AgentConfig.from_env({"DESKPOOL_DESKTOP_BLOCKED_NETWORKS": "10.20.0.0/24, 10.30.0.5"})
    assert config.desktop_blocked_networks == ("10.20.0.0/24", "10.30.0.5/32")
    with pytest.raises(ConfigError, match="DESKPOOL_DESKTOP_BLOCKED_NETWORKS"):
        AgentConfig.from_env({"DESKPOOL_DESKTOP_BLOCKED_NETWORKS": "campus"})
    # The portal on this host is closed by the INPUT rule already; elsewhere, by address.
    assert portal_addresses("http://127.0.0.1:8000") == []
    assert portal_addresses("https://10.20.0.2:443/") == ["10.20.0.2"]
