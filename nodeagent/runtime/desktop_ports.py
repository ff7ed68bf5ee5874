"""A desktop container's published ports, as the Docker engine reports them."""

from __future__ import annotations

from typing import Any

from docker.models.containers import Container

from nodeagent.desktop_audio import DESKTOP_AUDIO_PORT, LABEL_AUDIO
from nodeagent.protocol import DESKTOP_WEBSOCKIFY_PORT

WEBSOCKIFY_PORT_KEY = f"{DESKTOP_WEBSOCKIFY_PORT}/tcp"
AUDIO_PORT_KEY = f"{DESKTOP_AUDIO_PORT}/tcp"


def published_port(attrs: dict[str, Any], key: str = WEBSOCKIFY_PORT_KEY) -> int | None:
    bindings = (attrs.get("NetworkSettings", {}).get("Ports") or {}).get(key) or []
    for binding in bindings:
        if binding.get("HostPort"):
            return int(binding["HostPort"])
    return None


def audio_port(container: Container) -> int | None:
    """The published sound port, when the container's image serves sound (its label)."""
    if not (container.labels or {}).get(LABEL_AUDIO):
        return None
    return published_port(container.attrs, AUDIO_PORT_KEY)
