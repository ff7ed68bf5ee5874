"""Home volumes' names, shared by the portal (``home_volume_of``) and the agent (the
migration of old homes): ``deskpool-<installation>-home-<user>``. No Django, no Docker."""

from __future__ import annotations

import hashlib
import re

# A home's volume (and, under a home root, its folder) before homes carried the installation
# id: ``deskpool-home-<username>`` (``python -m nodeagent migrate-homes`` carries them over).
LEGACY_HOME_PREFIX = "deskpool-home-"
_HOME_KEPT = re.compile(r"[A-Za-z0-9.-]")
_HOME_USER_MAX = 120


def home_user_part(username: str) -> str:
    """A username as it may appear in a Docker volume name (``[a-zA-Z0-9][a-zA-Z0-9_.-]*``),
    unambiguously: letters, digits, ``.`` and ``-`` stay; every other character becomes
    ``_`` and the two hex digits of each of its UTF-8 bytes (``ann@campus.edu`` ->
    ``ann_40campus.edu``; ``_`` itself is ``_5f``), so two usernames never give one name. A
    part longer than 120 characters is cut and ends in ``_h`` and 16 hex digits of the
    username's hash (``_h`` appears in no uncut part)."""
    part = "".join(
        char if _HOME_KEPT.fullmatch(char) else "".join(f"_{b:02x}" for b in char.encode())
        for char in username
    )
    if len(part) <= _HOME_USER_MAX:
        return part
    digest = hashlib.sha256(username.encode()).hexdigest()[:16]
    return f"{part[: _HOME_USER_MAX - 18]}_h{digest}"


def home_volume_name(installation: str, username: str) -> str:
    """``deskpool-<installation>-home-<user>``: a person's home on this installation's nodes
    (the portal's ``home_volume_of`` names it; two portals sharing a Docker engine or a
    home root never mount each other's homes). ``<user>``: :func:`home_user_part`."""
    if not installation:
        raise ValueError("a home volume's name needs the portal's installation id")
    return f"deskpool-{installation}-home-{home_user_part(username)}"


def legacy_home_user(volume_name: str) -> str | None:
    """The username in a home volume's (or folder's) name from before homes carried the
    installation id (``deskpool-home-<username>``); None for any other name."""
    if not volume_name.startswith(LEGACY_HOME_PREFIX):
        return None
    return volume_name[len(LEGACY_HOME_PREFIX) :] or None
