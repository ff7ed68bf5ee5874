"""Forms of the console's pool page: cordon, uncordon and drain a node, rotate its gateway
key, and join tokens.

Each form hands its typed fields to the ``check_*`` service; a refusal lands next to the
field it names."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.kit.form_fields import AsciiIntegerField
from portal.kit.forms import CheckedForm
from scheduling.models import Node
from scheduling.services.drain import check_drain, check_node_reason
from scheduling.services.nodes import check_join_token

WAIT = "wait"
DEADLINE_CHOICES = [
    (WAIT, _("Wait for the sessions to end")),
    ("0", _("Requeue them now")),
    ("30", _("Requeue them after 30 minutes")),
    ("60", _("Requeue them after 1 hour")),
    ("240", _("Requeue them after 4 hours")),
    ("1440", _("Requeue them after 24 hours")),
]


CORDON, UNCORDON, DRAIN, UNDRAIN = "cordon", "uncordon", "drain", "undrain"
ROTATE_KEY = "rotate_key"
ACTION_CHOICES = [
    (CORDON, _("Cordon: place nothing new on it")),
    (UNCORDON, _("Uncordon: put it back in service")),
    (DRAIN, _("Drain: nothing new, and empty it")),
    (UNDRAIN, _("Stop draining")),
    (ROTATE_KEY, _("Rotate its gateway key: sign desktop tickets with a new key")),
]


class NodeActionForm(CheckedForm):
    """Cordon, uncordon, drain a node, stop its drain or rotate its gateway ticket key, each
    with a reason; a drain says
    what becomes of the node's sessions (wait, or requeue after a deadline)."""

    node = forms.ModelChoiceField(
        label=_("Node"),
        queryset=Node.objects.order_by("hostname"),
        error_messages={
            "required": _("Choose the node."),
            "invalid_choice": _("That node no longer exists; choose another."),
        },
    )
    action = forms.ChoiceField(
        label=_("Action"),
        choices=ACTION_CHOICES,
        error_messages={
            "required": _("Choose what to do."),
            "invalid_choice": _("Choose what to do."),
        },
    )
    reason = forms.CharField(
        label=_("Reason"),
        max_length=500,
        error_messages={"required": _("Say why, in a few words: it goes into the audit trail.")},
    )
    deadline = forms.ChoiceField(
        label=_("When draining, its sessions"),
        choices=DEADLINE_CHOICES,
        initial=WAIT,
        required=False,
        error_messages={"invalid_choice": _("Choose to wait or one of the deadlines listed.")},
    )

    def check(self, data: dict[str, Any]) -> None:
        data["deadline_at"] = None
        if data["action"] == DRAIN:
            chosen = data.get("deadline") or WAIT
            minutes = None if chosen == WAIT else int(chosen)
            data["reason"], data["deadline_at"] = check_drain(data["node"], data["reason"], minutes)
        else:
            data["reason"] = check_node_reason(data["reason"])


class JoinTokenForm(CheckedForm):
    """A new join token: the hostname it is for (or any host), its lifetime, and whether it
    may replace the node registered under that hostname."""

    hostname = forms.CharField(
        label=_("Hostname of the node"),
        max_length=200,
        required=False,
        help_text=_("The token works for this hostname only."),
    )
    any_host = forms.BooleanField(
        label=_("Any host: let any node join with this token"), required=False
    )
    hours = AsciiIntegerField(
        label=_("Valid for (hours)"),
        initial=24,
        error_messages={
            "required": _("Enter how many hours the token stays valid."),
            "invalid": _("Enter a whole number of hours, such as 24."),
        },
    )
    may_replace = forms.BooleanField(
        label=_("This token may replace the existing node with this hostname"),
        required=False,
    )

    def check(self, data: dict[str, Any]) -> None:
        data["hostname"] = check_join_token(
            data.get("hostname") or "",
            any_host=data["any_host"],
            hours=data["hours"],
            may_replace=data["may_replace"],
        )
        data["expires_at"] = timezone.now() + timedelta(hours=data["hours"])
