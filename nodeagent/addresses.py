"""A node's management address, checked where the agent publishes it and where the portal
registers it (docs/agent-protocol.md): a hostname or an IP literal, nothing else. No Django."""

from __future__ import annotations

import ipaddress
import re

NODE_ADDRESS_MAX = 200
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


HOSTNAME_MAX = 253
_HOST_PROBLEM = (
    "must be a hostname or an IP address only (such as gpu-a01.campus or 10.20.0.11): "
    "letters, digits, hyphens and dots, no scheme, port, path, query, fragment, user name, "
    "spaces or other characters"
)


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _hostname(value: str) -> bool:
    """An RFC 1123 hostname: dot-separated labels of 1 to 63 letters, digits and hyphens,
    neither first nor last a hyphen, 253 characters in all; the last label not all digits
    (10.0.0.300 is a broken IP address, not a name)."""
    labels = value.split(".")
    return (
        len(value) <= HOSTNAME_MAX
        and all(_HOST_LABEL.fullmatch(label) for label in labels)
        and not labels[-1].isdigit()
    )


def node_hostname(value: str) -> str:
    """A node's hostname (its name when it registers, a join token's host): an RFC 1123
    hostname or an IP address, returned as given (it is the node's name: the portal matches
    it as written). ValueError saying what it must be: no HTML, newlines, direction
    overrides or other characters reach the pages and logs that show it."""
    if not isinstance(value, str) or not value:
        raise ValueError(_HOST_PROBLEM)
    ip = _ip(value)
    if ip is not None:
        if getattr(ip, "scope_id", None):  # fe80::1%eth0: a link, not a node
            raise ValueError(_HOST_PROBLEM)
        return value
    if not _hostname(value):
        raise ValueError(_HOST_PROBLEM)
    return value


def node_address(value: str) -> str:
    """A node's management address as the portal may connect to it: a hostname or an IP
    literal and nothing else (:func:`node_hostname`; the port is each desktop's own), one
    node's (not a wildcard, multicast or broadcast address), normalised (lower case, no
    final dot). ValueError saying what to send instead."""
    if not isinstance(value, str) or not value or len(value) > NODE_ADDRESS_MAX:
        raise ValueError(
            f"must be a hostname or an IP address of 1 to {NODE_ADDRESS_MAX} characters"
        )
    # A final dot (an absolute DNS name) is the same host.
    node_hostname(value[:-1] if value.endswith(".") and len(value) > 1 else value)
    ip = _ip(value)
    if ip is not None:
        if ip.is_multicast or ip.is_unspecified or str(ip) == "255.255.255.255":
            raise ValueError(f"{value} is not one node's address: give its management address")
        return str(ip)
    return value.rstrip(".").lower()
