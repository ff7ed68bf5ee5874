"""The resource side's records, one module per subject; import them from here."""

from .alerts import Alert, AlertRule, AlertState, AlertTrack
from .bookings import Booking, BookingQuerySet, BookingSeries, WarmDesktop, WarmState
from .policy import PoolPolicy, Quota, QuotaScope
from .pool import DesktopProfile, Gpu, JoinToken, Node, Slice, hash_token
from .sessions import Allocation, AuditEvent, Session, SessionQuerySet
from .usage import PriceRule, PriceUnit, UsageRecord

__all__ = [
    "Alert",
    "AlertRule",
    "AlertState",
    "AlertTrack",
    "Allocation",
    "AuditEvent",
    "Booking",
    "BookingQuerySet",
    "BookingSeries",
    "DesktopProfile",
    "Gpu",
    "JoinToken",
    "Node",
    "PoolPolicy",
    "PriceRule",
    "PriceUnit",
    "Quota",
    "QuotaScope",
    "Session",
    "SessionQuerySet",
    "Slice",
    "UsageRecord",
    "WarmDesktop",
    "WarmState",
    "hash_token",
]
