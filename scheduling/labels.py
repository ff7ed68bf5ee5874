"""Words for the codes people would otherwise see: audit event kinds, the keys of an event's
details, GPU slices and slice kinds. In the active language (gettext); the code stays
available to pages (a ``title`` attribute, ``data-kind``) and to the CSV export.

An unknown code is shown as itself, never an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from nodeagent.software import IMAGE_TORCH

from .choices import AuditKind, SliceKind

AUDIT_LABELS = {
    "session.submitted": gettext_lazy("Desktop requested"),
    "session.transition": gettext_lazy("Desktop state changed"),
    "session.placed": gettext_lazy("Desktop placed on a GPU"),
    "session.preempted": gettext_lazy("Desktop preempted"),
    "session.blocked": gettext_lazy("Request held by a quota"),
    "session.demoted": gettext_lazy("Request moved to hobby"),
    "session.boosted": gettext_lazy("Request moved ahead"),
    "session.cancelled": gettext_lazy("Request cancelled by an admin"),
    "session.extended": gettext_lazy("Desktop time extended"),
    "node.registered": gettext_lazy("Node registered"),
    "node.claim_refused": gettext_lazy("Node's GPU claim refused"),
    "node.silent": gettext_lazy("Node went silent"),
    "node.cordoned": gettext_lazy("Node cordoned"),
    "node.cordon_cleared": gettext_lazy("Node cordon cleared"),
    "node.join_token_created": gettext_lazy("Node join token created"),
    "scheduler.cycle": gettext_lazy("Scheduling cycle"),
    "pool.alert": gettext_lazy("Pool alert"),
    "booking.created": gettext_lazy("Class booked"),
    "booking.cancelled": gettext_lazy("Class booking cancelled"),
    "booking.series_created": gettext_lazy("Weekly class series booked"),
    "booking.changed": gettext_lazy("Class booking changed"),
    "policy.changed": gettext_lazy("Policy changed"),
    "thesis.granted": gettext_lazy("Thesis grant given"),
    "thesis.revoked": gettext_lazy("Thesis grant revoked"),
    "thesis.ended": gettext_lazy("Thesis grant ended"),
    "course.roster_imported": gettext_lazy("Course roster imported"),
    "course.roster_changed": gettext_lazy("Course roster changed"),
    "course.ta_grants_changed": gettext_lazy("Course TA rights changed"),
    "course.settings_changed": gettext_lazy("Course settings changed"),
    "course.class_started": gettext_lazy("Class desktops started"),
    "course.class_stopped": gettext_lazy("Class desktops stopped"),
    "quota.requested": gettext_lazy("More GPU-hours requested"),
    "quota.answered": gettext_lazy("GPU-hour request answered"),
    "quota.self_answer_refused": gettext_lazy("Own GPU-hour request: answer refused"),
    "audit.pruned": gettext_lazy("Old audit events removed"),
    "usage.prices_changed": gettext_lazy("Usage prices changed"),
    "alert.rule_changed": gettext_lazy("Alert rule changed"),
    "alert.raised": gettext_lazy("Alert raised"),
    "alert.escalated": gettext_lazy("Alert escalated"),
    "alert.acknowledged": gettext_lazy("Alert acknowledged"),
    "alert.resolved": gettext_lazy("Alert resolved"),
    "signin.locked_out": gettext_lazy("Sign-in locked out"),
    "signin.sessions_ended": gettext_lazy("Every sign-in ended"),
    "signin.token_issued": gettext_lazy("API token issued"),
    "signin.token_revoked": gettext_lazy("API token revoked"),
    "signin.password_changed": gettext_lazy("Password changed"),
    "signin.password_set": gettext_lazy("Password set by an admin"),
}

# The keys events' details use most; any other key is shown as itself, spaced.
DETAIL_LABELS = {
    "action": gettext_lazy("action"),
    "gpu": gettext_lazy("GPU"),
    "index": gettext_lazy("GPU index"),
    "cause": gettext_lazy("cause"),
    "causes": gettext_lazy("causes"),
    "window_s": gettext_lazy("window (s)"),
    "requeued": gettext_lazy("requeued"),
    "after": gettext_lazy("after"),
    "before": gettext_lazy("before"),
    "booking": gettext_lazy("booking"),
    "course": gettext_lazy("course"),
    "days": gettext_lazy("days"),
    "deleted": gettext_lazy("deleted"),
    "from": gettext_lazy("from"),
    "to": gettext_lazy("to"),
    "hours": gettext_lazy("hours"),
    "key": gettext_lazy("key"),
    "new": gettext_lazy("new"),
    "old": gettext_lazy("old"),
    "reason": gettext_lazy("reason"),
    "request": gettext_lazy("request"),
    "rule": gettext_lazy("rule"),
    "scope": gettext_lazy("scope"),
    "session": gettext_lazy("session"),
    "sessions": gettext_lazy("sessions"),
    "state": gettext_lazy("state"),
    "stopped": gettext_lazy("stopped"),
    "student": gettext_lazy("student"),
    "username": gettext_lazy("user name"),
    "viewer": gettext_lazy("viewer"),
    "owner": gettext_lazy("owner"),
    "as": gettext_lazy("opened as"),
    "address": gettext_lazy("address"),
    "node": gettext_lazy("node"),
    "token": gettext_lazy("token"),
    "tokens": gettext_lazy("tokens"),
    "name": gettext_lazy("name"),
    "failures": gettext_lazy("failures"),
    "failures_in_a_row": gettext_lazy("failures in a row"),
    "expires_at": gettext_lazy("expires at"),
    "deadline": gettext_lazy("deadline"),
    "position": gettext_lazy("position"),
    "removed": gettext_lazy("removed"),
    "detail": gettext_lazy("detail"),
    "home": gettext_lazy("home folder"),
    "home_node": gettext_lazy("home folder's node"),
}

# Values that are codes under one key: shown in words ("as": "admin" is "an admin", while a
# user name "admin" under "viewer" stays a name).
DETAIL_VALUES = {
    ("as", "owner"): gettext_lazy("its owner"),
    ("as", "admin"): gettext_lazy("an admin"),
    ("home", "kept"): gettext_lazy("placed on the node that keeps it"),
    ("home", "away"): gettext_lazy("its node could not take the desktop: placed elsewhere"),
}


# The default alert rules' names (scheduling.services.alerts.default_rules), stored in English:
# shown in the reader's language. A rule an admin names is shown as named.
RULE_NAMES = {
    "GPU memory": gettext_lazy("GPU memory"),
    "GPU compute utilisation": gettext_lazy("GPU compute utilisation"),
    "GPU temperature": gettext_lazy("GPU temperature"),
    "GPU XID errors": gettext_lazy("GPU XID errors"),
    "Node lost": gettext_lazy("Node lost"),
    "Rack power": gettext_lazy("Rack power"),
    "Pool usage": gettext_lazy("Pool usage"),
    "Queue length": gettext_lazy("Queue length"),
    "GPU claimed by another node": gettext_lazy("GPU claimed by another node"),
    "Desktop start failed": gettext_lazy("Desktop start failed"),
    "GPU cordoned": gettext_lazy("GPU cordoned"),
}


# Why a GPU or node was cordoned (scheduling.rules.gpu_health); an XID is "xid:<code>".
CORDON_CAUSES = {
    "ecc_uncorrected": gettext_lazy("uncorrectable ECC errors"),
    "retired_pages_pending": gettext_lazy("retired memory pages waiting for a GPU reset"),
    "row_remap_pending": gettext_lazy("remapped memory rows waiting for a GPU reset"),
    "row_remap_failed": gettext_lazy("a memory row remap failed"),
    "lost": gettext_lazy("the driver lost the GPU"),
    "start_failures": gettext_lazy("desktops failed to start on it 3 times within 10 minutes"),
    "drained": gettext_lazy("drained by an admin"),
}


# Which PyTorch an image holds (nodeagent.software.IMAGE_TORCH), for the profile form.
TORCH_BUILDS = {
    "cuda": gettext_lazy("PyTorch's CUDA build, computes on the GPU"),
    "cpu": gettext_lazy("PyTorch's CPU build, computes on the CPU only"),
}


def torch_images_help() -> str:
    """The known images and the PyTorch each holds, in words."""
    known = "; ".join(
        f"{image}: {TORCH_BUILDS[build]}" for image, build in sorted(IMAGE_TORCH.items())
    )
    return _("Images with PyTorch: %(images)s.") % {"images": known}


def cordon_causes(reason: str) -> str:
    """A cordon's stored causes ("xid:79,lost") in words; an admin's own reason as written."""
    words = []
    for cause in (reason or "").split(","):
        code = cause.strip()
        if code.startswith("xid:") and code[4:].isdigit():
            words.append(_("XID %(code)s") % {"code": code[4:]})
        elif code in CORDON_CAUSES:
            words.append(str(CORDON_CAUSES[code]))
        elif code:
            return reason  # not a list of causes: an admin's words
    return "; ".join(words)


def rule_name(name: str) -> str:
    label = RULE_NAMES.get(name)
    return str(label) if label is not None else name


SUBJECTS = {
    "gpu": gettext_lazy("GPU %(name)s"),
    "node": gettext_lazy("Node %(name)s"),
    "rack": gettext_lazy("Rack %(name)s"),
}


def subject_label(subject: str) -> str:
    """An alert's subject ("node:gpu-a1", "gpu:<uuid>", "rack:r1", "pool") in words."""
    if subject == "pool":
        return _("The pool")
    kind, _sep, name = subject.partition(":")
    text = SUBJECTS.get(kind)
    return str(text) % {"name": name} if text is not None and name else subject


def audit_label(kind: str) -> str:
    """The event kind in words: "Desktop requested" for ``session.submitted``."""
    label = AUDIT_LABELS.get(kind)
    if label is not None:
        return str(label)
    if kind in AuditKind.values:
        named = AuditKind(kind).label
        if named != AuditKind(kind).name.replace("_", " ").title():  # given, not generated
            return str(named)
    return kind


def audit_kind_choices() -> list[tuple[str, str]]:
    """Every kind with its words, sorted by the words (for a search form's list)."""
    return sorted(((k, audit_label(k)) for k in AuditKind.values), key=lambda c: c[1])


def _value(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value) or "—"
    if isinstance(value, Mapping):
        return "; ".join(f"{_key(k)}: {_value(v)}" for k, v in value.items()) or "—"
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)


def _key(key: Any) -> str:
    label = DETAIL_LABELS.get(str(key))
    return str(label) if label is not None else str(key).replace("_", " ")


def detail_rows(data: Any) -> list[tuple[str, str, str]]:
    """An event's details as (key, label, value) rows, in the keys' order; a value that is
    not a mapping is one row with an empty key."""
    if not isinstance(data, Mapping):
        return [] if data in (None, "", [], {}) else [("", "", _value(data))]
    return [(str(k), capfirst(_key(k)), _detail_value(str(k), v)) for k, v in sorted(data.items())]


def _detail_value(key: str, value: Any) -> str:
    words = DETAIL_VALUES.get((key, value)) if isinstance(value, str) else None
    return str(words) if words is not None else _value(value)


def kind_label(kind: str) -> str:
    """A slice kind in words (``mig`` -> "MIG instance")."""
    return str(SliceKind(kind).label) if kind in SliceKind.values else kind


def slice_label(index: Any, kind_or_profile: str) -> str:
    """One slice: "GPU 0, whole card", "GPU 0, MIG 1g.10gb", "GPU 1, time-sliced share"."""
    if kind_or_profile == SliceKind.WHOLE:
        return _("GPU %(index)s, whole card") % {"index": index}
    if kind_or_profile == SliceKind.SHARE:
        return _("GPU %(index)s, time-sliced share") % {"index": index}
    if kind_or_profile == SliceKind.MIG:
        return _("GPU %(index)s, MIG instance") % {"index": index}
    return _("GPU %(index)s, MIG %(profile)s") % {"index": index, "profile": kind_or_profile}


def slice_words(piece: Any) -> str:
    """A :class:`~scheduling.models.Slice` in words (its GPU prefetched)."""
    return slice_label(piece.gpu.index, piece.profile or piece.kind)


SLICE_CODE = re.compile(r"gpu(\d+) (\S+)")


def slices_label(code: str | None) -> str:
    """A payload's ``slice`` ("gpu0 whole, gpu1 1g.10gb") in words; "" for none."""
    if not code:
        return ""
    parts = []
    for part in code.split(", "):
        match = SLICE_CODE.fullmatch(part.strip())
        parts.append(slice_label(match[1], match[2]) if match else part)
    return "; ".join(parts)
