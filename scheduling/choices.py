"""Enumerations of the resource side: session states, purposes, slice kinds."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class SessionState(models.TextChoices):
    QUEUED = "QUEUED", _("Queued")
    PLACED = "PLACED", _("Placed")
    STARTING = "STARTING", _("Starting")
    RUNNING = "RUNNING", _("Running")
    STOPPING = "STOPPING", _("Stopping")
    ENDED = "ENDED", _("Ended")
    PREEMPTING = "PREEMPTING", _("Preempting")
    PREEMPTED = "PREEMPTED", _("Preempted")
    FAILED = "FAILED", _("Failed")
    EXPIRED = "EXPIRED", _("Expired")
    CANCELLED = "CANCELLED", _("Cancelled")
    LOST = "LOST", _("Lost")
    # Idle for too long (docs/lifecycle.md): the desktop stopped and the slice was released,
    # the home is kept; the person may resume it (back to the queue with its age kept).
    SUSPENDED = "SUSPENDED", _("Suspended")


TERMINAL_STATES = frozenset(
    {
        SessionState.ENDED,
        SessionState.FAILED,
        SessionState.EXPIRED,
        SessionState.CANCELLED,
        SessionState.LOST,
    }
)
# States in which a session holds its allocation and the node should run its desktop
# (PREEMPTING: it runs on through its grace countdown).
ON_NODE_STATES = frozenset(
    {SessionState.PLACED, SessionState.STARTING, SessionState.RUNNING, SessionState.PREEMPTING}
)
WAITING_STATES = frozenset({SessionState.QUEUED, SessionState.PREEMPTED})
# States in which a desktop may still exist on the node (what a silent node's sweep moves).
NODE_BOUND_STATES = ON_NODE_STATES | {SessionState.STOPPING, SessionState.PREEMPTING}
# States in which the person may open the desktop (PREEMPTING: until its grace ends).
OPENABLE_STATES = frozenset({SessionState.RUNNING, SessionState.PREEMPTING})


class IdleState(models.TextChoices):
    """Where a session stands with the idle policy (``scheduling.rules.idle_rules``)."""

    ACTIVE = "active", _("Active")
    IDLE = "idle", _("Idle")
    WARNED = "warned", _("Warned")
    SUSPENDED = "suspended", _("Suspended")
    ENDED = "ended", _("Ended")


class Purpose(models.TextChoices):
    THESIS = "thesis", _("Thesis")
    COURSEWORK = "coursework", _("Coursework")
    HOBBY = "hobby", _("Hobby")


# Lower is served first.
PURPOSE_TIER = {Purpose.THESIS: 1, Purpose.COURSEWORK: 2, Purpose.HOBBY: 3}


class SliceKind(models.TextChoices):
    MIG = "mig", _("MIG instance")
    SHARE = "share", _("Time-sliced share")
    WHOLE = "whole", _("Whole GPU")


class AuditKind(models.TextChoices):
    SESSION_SUBMITTED = "session.submitted"
    SESSION_TRANSITION = "session.transition"
    SESSION_PLACED = "session.placed"
    NODE_REGISTERED = "node.registered"
    # a registration listed a GPU or MIG device another node holds: refused (and alerted)
    NODE_CLAIM_REFUSED = "node.claim_refused"
    NODE_SILENT = "node.silent"
    NODE_CORDONED = "node.cordoned"
    NODE_CORDON_CLEARED = "node.cordon_cleared"
    JOIN_TOKEN_CREATED = "node.join_token_created"
    CYCLE = "scheduler.cycle"
    SESSION_PREEMPTED = "session.preempted"
    SESSION_BLOCKED = "session.blocked"
    POOL_ALERT = "pool.alert"
    BOOKING_CREATED = "booking.created"
    BOOKING_CANCELLED = "booking.cancelled"
    POLICY_CHANGED = "policy.changed"
    BOOKING_SERIES_CREATED = "booking.series_created"
    BOOKING_CHANGED = "booking.changed"
    THESIS_GRANTED = "thesis.granted"
    THESIS_REVOKED = "thesis.revoked"
    THESIS_ENDED = "thesis.ended"  # a grant's end was applied to its queued requests
    SESSION_DEMOTED = "session.demoted"  # no longer eligible for its purpose: now hobby
    ROSTER_IMPORTED = "course.roster_imported"
    ROSTER_CHANGED = "course.roster_changed"
    TA_GRANTS_CHANGED = "course.ta_grants_changed"
    COURSE_SETTINGS_CHANGED = "course.settings_changed"
    CLASS_STARTED = "course.class_started"
    CLASS_STOPPED = "course.class_stopped"
    QUOTA_REQUESTED = "quota.requested"
    QUOTA_ANSWERED = "quota.answered"
    # someone tried to answer their own quota request (refused, whatever their rights)
    QUOTA_SELF_ANSWER_REFUSED = "quota.self_answer_refused"
    AUDIT_PRUNED = "audit.pruned"  # the retention task removed events older than the limit
    USAGE_PRICES_CHANGED = "usage.prices_changed"
    ALERT_RULE_CHANGED = "alert.rule_changed"
    ALERT_RAISED = "alert.raised"
    ALERT_ESCALATED = "alert.escalated"
    ALERT_ACKNOWLEDGED = "alert.acknowledged"
    ALERT_RESOLVED = "alert.resolved"
    SESSION_BOOSTED = "session.boosted"  # an admin moved a request ahead within its tier
    SESSION_CANCELLED = "session.cancelled"  # an admin cancelled a request, with a reason
    # sign-in hygiene (docs/security.md): a name and address locked out after repeated
    # failures; an admin ended every login session and API token of a person
    SIGNIN_LOCKED_OUT = "signin.locked_out"
    SESSIONS_ENDED = "signin.sessions_ended"
    SESSION_EXTENDED = "session.extended"  # its time limit moved by the profile's step
    # a node registered again with another address (data: old, new): where its gateway is
    # reached (the URL a ticket comes with)
    NODE_ADDRESS_CHANGED = "node.address_changed", _("Node address changed")
    # the node's gateway reported someone in to a session's screen on their ticket (data:
    # viewer, owner, as: owner or admin), the owner's own opens included
    DESKTOP_OPENED = "desktop.opened", _("Desktop opened")
    # the node's gateway reported someone hearing a session's sound (data as for
    # desktop.opened)
    DESKTOP_SOUND_OPENED = "desktop.sound_opened", _("Desktop sound opened")
    # account hygiene (docs/audit.md): API tokens issued and revoked (data: token id and name,
    # never the token), a password changed by its owner or set by an admin or on the console
    # (data: user name, never the password)
    API_TOKEN_ISSUED = "signin.token_issued", _("API token issued")
    API_TOKEN_REVOKED = "signin.token_revoked", _("API token revoked")
    PASSWORD_CHANGED = "signin.password_changed", _("Password changed")
    PASSWORD_SET = "signin.password_set", _("Password set by an admin")
    # the Files page (docs/lifecycle.md "Home files"): a file put into, taken from or deleted
    # from a person's home on a node (data: path, size, node); listings are not audited
    HOME_UPLOADED = "home.uploaded", _("Home file uploaded")
    HOME_DOWNLOADED = "home.downloaded", _("Home file downloaded")
    HOME_DELETED = "home.deleted", _("Home file deleted")
    # course folders (docs/course-files.md): a file put into or deleted from a course's
    # folder (data: course, path, size, sha256), the folder's cap set on the console
    COURSE_FILE_UPLOADED = "course.file_uploaded", _("Course file uploaded")
    COURSE_FILE_DELETED = "course.file_deleted", _("Course file deleted")
    COURSE_FOLDER_CAP_CHANGED = "course.folder_cap_changed", _("Course folder cap changed")
    # an admin rotated a node's gateway ticket key (data: the key ids, old and new; never a key)
    NODE_GATEWAY_KEY_ROTATED = "node.gateway_key_rotated", _("Gateway key rotated")
    # a sick GPU taken out of placement (data: causes; actor health or an admin), put back in
    # service by an admin, or drained (its desktops requeued) by an admin (docs/monitoring.md)
    GPU_CORDONED = "gpu.cordoned", _("GPU cordoned")
    GPU_CORDON_CLEARED = "gpu.cordon_cleared", _("GPU uncordoned")
    GPU_DRAINED = "gpu.drained", _("GPU drained")
