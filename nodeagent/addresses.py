"""A node's management address, checked where the agent publishes it and where the portal
registers it (docs/agent-protocol.md): a hostname or an IP literal, nothing else. No Django."""

from __future__ import annotations

import ipaddress
import re

NODE_ADDRESS_MAX = 200
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def node_address(value: str) -> str:
    """A node's management address as the portal may connect to it: a hostname or an IP
    literal and nothing else (no scheme, port, path, query, fragment, user or spaces; the
    port is each desktop's own). ValueError saying what to send instead."""
    if not isinstance(value, str) or not value or len(value) > NODE_ADDRESS_MAX:
        raise ValueError(
            f"must be a hostname or an IP address of 1 to {NODE_ADDRESS_MAX} characters"
        )
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        ip = None
    if ip is not None:
        if (
            ip.is_unspecified
            or ip.is_multicast
            or str(ip) == "255.255.255.255"
            or getattr(ip, "scope_id", None)  # fe80::1%eth0: a link, not a node
        ):
            raise ValueError(f"{value} is not one node's address: give its management address")
        return str(ip)
    labels = value.rstrip(".").split(".") if value != "." else [""]
    if (
        len(value) > 253
        or not all(_HOST_LABEL.match(label) for label in labels)
        or labels[-1].isdigit()  # 10.0.0.300, 1.2.3: a broken IP address, not a name
    ):
        raise ValueError(
            "must be a hostname or an IP address only (such as gpu-a01.campus or 10.20.0.11): "
            "no scheme, port, path, query, fragment, user name or spaces"
        )
    return value.rstrip(".").lower()
