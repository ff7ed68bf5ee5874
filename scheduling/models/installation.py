"""This portal's installation id: made once, kept in the pool policy's row, read once per
process.

Each agent gets it at registration (``RegistrationAnswer.installation_id``) and names and
labels its Docker containers, volumes and networks with it, adopting and removing only its
own; the homes carry it in their names (:func:`.sessions.home_volume_of`). Two portals whose
agents share one Docker engine (even under the same node name) leave each other's desktops
and homes alone (docs/agent-protocol.md). The services use it as
``scheduling.services.installation.installation_id``.
"""

from __future__ import annotations

import secrets

from .policy import PoolPolicy

# The id never changes once made: every home's name asks for it, so it is read once.
_known: dict[str, str] = {}


def installation_id() -> str:
    """The id, made at the first call (twelve hex digits); the same ever after."""
    if known := _known.get("id"):
        return known
    policy = PoolPolicy.current()
    made = policy.installation_id
    if not made:
        # The first writer wins; a racing second one reads the winner's.
        PoolPolicy.objects.filter(pk=policy.pk, installation_id="").update(
            installation_id=secrets.token_hex(6)
        )
        made = PoolPolicy.objects.values_list("installation_id", flat=True).get(pk=policy.pk)
    _known["id"] = made
    return made


def forget_installation_id() -> None:
    """Read the id from the database again at the next call (tests: each test's database
    is another installation's)."""
    _known.clear()
