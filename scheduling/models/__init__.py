"""The resource side's records, one module per subject; import them from here."""

from .alerts import Alert, AlertRule, AlertState, AlertTrack
from .audit import MIN_RETENTION_DAYS, AuditEvent, AuditRetention
from .bookings import (
    Booking,
    BookingQuerySet,
    BookingSeries,
    CourseDesktop,
    WarmDesktop,
    WarmState,
    default_profile_of,
    set_default_profile,
)
from .course_files import CourseFile, CourseFolder
from .gateway import GatewayTicket, GatewayTicketQuerySet, TicketPurpose, TicketVia
from .home_files import HomeTask, HomeTaskKind, HomeTaskState, HomeUsage
from .lifecycle import IdlePolicy, LifecycleNotices, SessionActivity
from .metrics import MetricRollup, MetricSample, MetricSource
from .policy import PoolPolicy, Quota, QuotaScope
from .pool import DesktopProfile, Gpu, JoinToken, Node, Slice, hash_token
from .sessions import Allocation, Session, SessionQuerySet
from .usage import PriceRule, PriceUnit, UsageRecord

__all__ = [
    "MIN_RETENTION_DAYS",
    "Alert",
    "AlertRule",
    "AlertState",
    "AlertTrack",
    "Allocation",
    "AuditEvent",
    "AuditRetention",
    "Booking",
    "BookingQuerySet",
    "BookingSeries",
    "CourseDesktop",
    "CourseFile",
    "CourseFolder",
    "DesktopProfile",
    "GatewayTicket",
    "GatewayTicketQuerySet",
    "Gpu",
    "HomeTask",
    "HomeTaskKind",
    "HomeTaskState",
    "HomeUsage",
    "IdlePolicy",
    "JoinToken",
    "LifecycleNotices",
    "MetricRollup",
    "MetricSample",
    "MetricSource",
    "Node",
    "PoolPolicy",
    "PriceRule",
    "PriceUnit",
    "Quota",
    "QuotaScope",
    "Session",
    "SessionActivity",
    "SessionQuerySet",
    "Slice",
    "TicketPurpose",
    "TicketVia",
    "UsageRecord",
    "WarmDesktop",
    "WarmState",
    "default_profile_of",
    "hash_token",
    "set_default_profile",
]
