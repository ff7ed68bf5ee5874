"""The network a node's desktops live on: sealed off from each other and from the host.

Each node's desktops join a bridge network of their own, ``deskpool-<node>-desktops``,
which the agent creates (and labels as its own) before the first start:

* **No desktop reaches another:** the bridge has inter-container communication off
  (``com.docker.network.bridge.enable_icc=false``), so the engine drops traffic between
  two containers of the bridge; traffic between two bridges is dropped by the engine's
  isolation rules. IPv6 is off inside every desktop (``disable_ipv6`` sysctl): the engine's
  ICC rule covers IPv4 only, and link-local IPv6 would otherwise pass between them.
* **No desktop reaches the host** (the agent, the portal and anything else listening on
  the node's addresses, the published desktop ports included): the agent puts one jump in
  the host's ``INPUT`` chain for every desktop bridge (interfaces ``dpd*``, one wildcard
  rule for all of them) to the chain ``DESKPOOL-DESKTOPS``, which keeps replies to
  connections the host opened (the agent's readiness check and the node's gateway reach
  websockify and the sound through the published ports) and rejects everything else.
* **Outbound stays open:** the bridge masquerades as the default bridge does; traffic to
  other hosts is forwarded as before.

The firewall needs ``iptables`` and root, as the agent has in production
(``deploy/systemd/deskpool-agent.service``); without them the agent says so in its log and
desktops still start, isolated from each other but not from the host.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import shutil
import socket
import subprocess
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

import docker
from docker.errors import APIError, NotFound
from docker.models.networks import Network

from nodeagent.protocol import LABEL_INSTALLATION, LABEL_MANAGED, LABEL_NODE
from nodeagent.runtime.base import StartFailed, name_stem

logger = logging.getLogger(__name__)

BRIDGE_PREFIX = "dpd"  # every desktop bridge's interface name starts with it
FIREWALL_CHAIN = "DESKPOOL-DESKTOPS"
FORWARD_CHAIN = "DESKPOOL-DESKTOPS-OUT"
# Inside the container: no IPv6 at all (the engine's ICC rule is IPv4 only).
DESKTOP_SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
_IPTABLES_TIMEOUT_S = 20
_network_lock = threading.Lock()
_firewall_lock = threading.Lock()
_firewall_ready: tuple[str, ...] | None = None  # the blocked networks installed
_firewall_failed: set[tuple[str, ...]] = set()  # those it could not install (said once)


def network_name(node_name: str, installation: str = "") -> str:
    return f"{name_stem(node_name, installation)}-desktops"


def bridge_name(network: str) -> str:
    """The Linux interface of the network's bridge: at most 15 characters, ``dpd`` first."""
    return BRIDGE_PREFIX + hashlib.sha256(network.encode()).hexdigest()[:10]


def network_options(network: str) -> dict[str, str]:
    return {
        "com.docker.network.bridge.name": bridge_name(network),
        "com.docker.network.bridge.enable_icc": "false",
        "com.docker.network.bridge.enable_ip_masquerade": "true",
    }


def ensure_network(
    client: docker.DockerClient,
    node_name: str,
    blocked: Sequence[str] = (),
    installation: str = "",
) -> str:
    """The node's desktop network (created when missing) with the host firewall in place
    (``blocked``: networks desktops must not reach, see :func:`ensure_firewall`); returns its
    name, for ``containers.create(network=...)``. Named and labelled with the portal's
    ``installation`` id, when it has one."""
    name = network_name(node_name, installation)
    with _network_lock:  # desktops start in parallel threads: one creates, the rest find
        try:
            network: Network = client.networks.get(name)
        except NotFound:
            network = _create(client, name, node_name, installation)
    options = network.attrs.get("Options") or {}
    if options.get("com.docker.network.bridge.enable_icc") != "false":
        # Someone else made a network of this name: desktops must not join it.
        raise StartFailed(f"network {name} exists without enable_icc=false: remove it")
    ensure_firewall(blocked)
    return name


def _create(
    client: docker.DockerClient, name: str, node_name: str, installation: str = ""
) -> Network:
    labels = {LABEL_MANAGED: "true", LABEL_NODE: node_name}
    if installation:
        labels[LABEL_INSTALLATION] = installation
    try:
        return client.networks.create(
            name,
            driver="bridge",
            options=network_options(name),
            labels=labels,
            check_duplicate=True,
        )
    except APIError:
        # Another agent process of this node (a restart overlapping) created it meanwhile;
        # the engine says so in several ways (409, or "same bridge name"). Else: the error.
        try:
            return client.networks.get(name)
        except NotFound:
            pass
        raise


def remove_networks(client: docker.DockerClient, node_name: str, installation: str = "") -> None:
    """Remove the node's desktop networks (tests, and a node taken out of service); with an
    installation id, only that installation's."""
    labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={node_name}"]
    if installation:
        labels.append(f"{LABEL_INSTALLATION}={installation}")
    for network in client.networks.list(filters={"label": labels}):
        with contextlib.suppress(NotFound):
            network.remove()


# -- the host firewall -------------------------------------------------------------------


def firewall_rules() -> list[list[str]]:
    """The chain's rules, in order: replies pass, new TCP is reset, anything else rejected."""
    return [
        ["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"],
        ["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"],
        ["-j", "REJECT", "--reject-with", "icmp-port-unreachable"],
    ]


def ensure_firewall(blocked: Sequence[str] = ()) -> bool:
    """Install the host rules once per agent process (and again for other ``blocked``
    networks); False (and an error in the log) where iptables cannot be used.

    ``blocked``: addresses or CIDR networks elsewhere that desktops must not open
    connections to (the portal's hosts, the management network), enforced where the host
    forwards desktop traffic (chain ``DESKPOOL-DESKTOPS-OUT`` from ``DOCKER-USER``)."""
    global _firewall_ready
    wanted = tuple(sorted(set(blocked)))
    with _firewall_lock:
        if _firewall_ready == wanted:
            return True
        try:
            _install_firewall()
            _install_blocked(wanted)
        except (OSError, subprocess.SubprocessError) as error:
            # Said once as an error (every start tries again, e.g. after iptables appears).
            log = logger.debug if wanted in _firewall_failed else logger.error
            _firewall_failed.add(wanted)
            log(
                "cannot install the desktop firewall (iptables, as root): desktops can "
                "reach ports on this host and the networks it should block: %s",
                error,
            )
            return False
        _firewall_ready = wanted
        return True


def _install_firewall() -> None:
    if shutil.which("iptables") is None:
        raise OSError("iptables is not installed")
    listed = _iptables("-S", FIREWALL_CHAIN, check=False)
    if listed.returncode != 0:
        _iptables("-N", FIREWALL_CHAIN)
    wanted = [f"-A {FIREWALL_CHAIN} {' '.join(rule)}" for rule in firewall_rules()]
    if listed.stdout.splitlines()[1:] != wanted:
        # Refill (another agent of this host doing the same meanwhile leaves the same
        # rules, at worst twice).
        _iptables("-F", FIREWALL_CHAIN)
        for rule in firewall_rules():
            _iptables("-A", FIREWALL_CHAIN, *rule)
    jump = ["INPUT", "-i", f"{BRIDGE_PREFIX}+", "-j", FIREWALL_CHAIN]
    if _iptables("-C", *jump, check=False).returncode != 0:
        _iptables("-I", *jump)


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # -w: wait for the xtables lock dockerd (or another agent) may hold.
    done = subprocess.run(
        ["iptables", "-w", "5", *args],
        capture_output=True,
        text=True,
        timeout=_IPTABLES_TIMEOUT_S,
        check=False,
    )
    if check and done.returncode != 0:
        raise OSError(f"iptables {' '.join(args)}: {done.stderr.strip()}")
    return done


def _install_blocked(blocked: tuple[str, ...]) -> None:
    """Replies pass, new connections to a blocked network are rejected; rules are only
    added (agents of one host with other lists add theirs)."""
    if _iptables("-n", "-L", FORWARD_CHAIN, check=False).returncode != 0:
        _iptables("-N", FORWARD_CHAIN)
    replies = ["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"]
    if _iptables("-C", FORWARD_CHAIN, *replies, check=False).returncode != 0:
        _iptables("-I", FORWARD_CHAIN, "1", *replies)
    for network in blocked:
        rule = ["-d", network, "-j", "REJECT", "--reject-with", "icmp-port-unreachable"]
        if _iptables("-C", FORWARD_CHAIN, *rule, check=False).returncode != 0:
            _iptables("-A", FORWARD_CHAIN, *rule)
    # DOCKER-USER: dockerd's chain for rules of its users, before its own in FORWARD.
    jump = ["DOCKER-USER", "-i", f"{BRIDGE_PREFIX}+", "-j", FORWARD_CHAIN]
    if _iptables("-C", *jump, check=False).returncode != 0:
        _iptables("-I", *jump)


def portal_addresses(portal_url: str) -> list[str]:
    """The portal's addresses, from its URL, that are not this host's loopback (the host's
    own addresses are closed to desktops already)."""
    host = urlsplit(portal_url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except OSError:
        logger.warning("cannot resolve the portal's host %r: desktops are not kept from it", host)
        return []
    found = {str(info[4][0]) for info in infos}
    return sorted(a for a in found if not ipaddress.ip_address(a).is_loopback)
