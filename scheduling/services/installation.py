"""This portal's installation id (:mod:`scheduling.models.installation`: made once, kept in
the pool policy's row, read once per process).

Each agent gets it at registration (``RegistrationAnswer.installation_id``) and names and
labels its Docker containers, volumes and networks with it, adopting and removing only its
own; the homes carry it in their names (``deskpool-<installation>-home-<user>``,
:func:`scheduling.models.sessions.home_volume_of`): two portals whose agents share one
Docker engine (even under the same node name) leave each other's desktops and homes alone
(docs/agent-protocol.md).
"""

from __future__ import annotations

from ..models.installation import forget_installation_id, installation_id

__all__ = ["forget_installation_id", "installation_id"]
