"""This portal's installation id: made once, kept in the pool policy's row.

Each agent gets it at registration (``RegistrationAnswer.installation_id``) and names and
labels its Docker containers, volumes and networks with it, adopting and removing only its
own: two portals whose agents share one Docker engine (even under the same node name) leave
each other's desktops alone (docs/agent-protocol.md).
"""

from __future__ import annotations

import secrets

from ..models import PoolPolicy


def installation_id() -> str:
    """The id, made at the first call (twelve hex digits); the same ever after."""
    policy = PoolPolicy.current()
    if policy.installation_id:
        return policy.installation_id
    # The first writer wins; a racing second one reads the winner's.
    PoolPolicy.objects.filter(pk=policy.pk, installation_id="").update(
        installation_id=secrets.token_hex(6)
    )
    return PoolPolicy.objects.values_list("installation_id", flat=True).get(pk=policy.pk)
