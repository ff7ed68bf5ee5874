"""A node's address: only where the management network lets browsers reach its gateway.

A node declares its address when it registers (``Registration.address``: a hostname or an
IP literal, :func:`nodeagent.addresses.node_address`), and a ticket's URL sends the browser
to the node's gateway there (``DESKPOOL_GATEWAY_URL`` filled with the address and the
gateway's port, :func:`.gateway_tickets.gateway_url`). The address is the node's word, so
the portal keeps it to ``settings.NODE_ADDRESS_NETWORKS`` (``DESKPOOL_NODE_ADDRESS_NETWORKS``,
docs/deploy.md): at registration every address a hostname resolves to must be in one of
those networks, and the address and port are checked again before a ticket's URL is built,
on the address they checked (:func:`desktop_endpoint`; docs/security.md "Desktops sealed
off").
"""

from __future__ import annotations

import ipaddress
import socket

from django.conf import settings
from django.utils.translation import gettext as _

from nodeagent.addresses import node_address, node_hostname

from . import ServiceError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _resolved(host: str) -> list[IpAddress]:
    """The addresses of an IP literal or a hostname (empty when it does not resolve)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    # sockaddr[0] of an IPv6 answer may carry a scope (fe80::1%eth0): keep the address.
    return sorted({ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found}, key=str)


def check_node_hostname(hostname: str, *, field: str = "hostname") -> str:
    """A node's hostname as given (a join token's host, a node's name in the admin) when it
    is an RFC 1123 hostname or an IP address (:func:`nodeagent.addresses.node_hostname`, the
    check the agent's registration passes too); ServiceError saying what it must be if not."""
    try:
        return node_hostname(hostname)
    except ValueError:
        raise ServiceError(
            _(
                "%(hostname)s is not a hostname. Give the node's hostname (letters, digits and "
                "hyphens, in parts separated by dots, such as gpu-a01.campus.edu) or its IP "
                "address."
            )
            % {"hostname": repr(hostname[:80])},
            field=field,
        ) from None


def check_node_address(address: str) -> str:
    """The address, normalised, when it is a hostname or an IP literal whose every address is
    in the management network; ServiceError (``field="address"``) saying what to do if not."""
    return _checked(address)[0]


def _checked(address: str) -> tuple[str, list[IpAddress]]:
    """The normalised address and what it resolves to, all in the management network."""
    try:
        address = node_address(address)
    except ValueError as error:
        raise ServiceError(
            _("The node address %(address)s is not valid: %(problem)s.")
            % {"address": address[:200], "problem": error},
            field="address",
        ) from None
    resolved = _resolved(address)
    if not resolved:
        raise ServiceError(
            _(
                "The node address %(address)s does not resolve. Set DESKPOOL_PUBLISH_ADDRESS "
                "on the node to its management IP address or a name the portal resolves."
            )
            % {"address": address},
            field="address",
        )
    networks = settings.NODE_ADDRESS_NETWORKS
    outside = [ip for ip in resolved if not any(ip in network for network in networks)]
    if outside:
        raise ServiceError(
            _(
                "The node address %(address)s (%(outside)s) is outside the management "
                "network (%(networks)s). Set DESKPOOL_PUBLISH_ADDRESS on the node to its "
                "management address, or have an admin add its network to "
                "DESKPOOL_NODE_ADDRESS_NETWORKS."
            )
            % {
                "address": address,
                "outside": ", ".join(map(str, outside)),
                "networks": ", ".join(map(str, networks)) or "-",
            },
            field="address",
        )
    return address, resolved


def desktop_endpoint(address: str, port: int) -> tuple[str, int] | None:
    """(IP, port) of a node's gateway for a ticket's URL, or None when the address is not a
    valid node address in the management network or the port is not 1-65535 (a row written
    before these checks, or by hand). A hostname is resolved and checked here and the IP
    returned is the one it checked (IPv4 first), so a name cannot resolve elsewhere by the
    time the browser connects."""
    if not isinstance(port, int) or not 1 <= port <= 65535:
        return None
    try:
        _address, resolved = _checked(address)
    except ServiceError:
        return None
    return str(min(resolved, key=lambda found: (found.version, str(found)))), port
