"""Quotas, admission at submit and the pool alert (used by the planner and by the portal).

A request is covered by up to three quotas: its user's, its course's and its department's
(``key`` ``"*"`` is the default for members of a scope without a quota of their own). The
portal asks :func:`quota_block` and :func:`admission_block` at submit; the planner asks
:func:`quota_block` before placing each request and counts each placement with
:func:`count_session`, so later requests of the same cycle see it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import Alert, FreeSlice, Policy, QueuedRequest, Quota
from .reasons import Code, Reason

QuotaIndex = dict[tuple[str, str], Quota]  # (scope, key) -> quota
SessionCounts = dict[tuple[str, str], int]  # (scope, quota key) -> sessions placed this cycle


def scopes(r: QueuedRequest) -> tuple[tuple[str, str], ...]:
    """The (scope, key) pairs that may have a quota for this request."""
    return (("user", r.user), ("course", r.course), ("department", r.department))


def index_quotas(quotas: Iterable[Quota]) -> QuotaIndex:
    return {(q.scope, q.key): q for q in quotas}


def quota_for(quotas: QuotaIndex, scope: str, key: str) -> Quota | None:
    """The member's own quota, else the scope's ``*`` default; None for an empty key."""
    if not key:
        return None
    return quotas.get((scope, key)) or quotas.get((scope, "*"))


def largest_slice_mb(quotas: QuotaIndex, r: QueuedRequest) -> int | None:
    """The tightest largest-slice limit of the quotas covering ``r`` (None: no limit)."""
    limit = None
    for scope, key in scopes(r):
        q = quota_for(quotas, scope, key)
        if q is not None and q.max_slice_memory_mb is not None:
            limit = min(limit or q.max_slice_memory_mb, q.max_slice_memory_mb)
    return limit


def count_session(
    request: QueuedRequest, quotas: QuotaIndex, extra_sessions: SessionCounts
) -> None:
    """Count a session just placed for ``request`` against each quota that covers it."""
    for scope, key in scopes(request):
        quota = quota_for(quotas, scope, key)
        if quota is not None:
            extra_sessions[(scope, quota.key)] = extra_sessions.get((scope, quota.key), 0) + 1


def quota_block(
    request: QueuedRequest,
    quotas: QuotaIndex,
    extra_sessions: SessionCounts | None = None,
    *,
    starting: bool = True,
) -> Reason | None:
    """Why a quota stops this request now, or None. ``starting``: it would take a session.

    Codes (params ``scope``, ``key`` = the request's user, course or department, then):
    ``QUOTA_SLICE_MEMORY`` (``limit_mb``, ``need_mb``), ``QUOTA_GPU_HOURS`` (``limit``,
    ``used``) and ``QUOTA_SESSIONS`` (``limit``).
    """
    extra = extra_sessions or {}
    for scope, key in scopes(request):
        quota = quota_for(quotas, scope, key)
        if quota is None:
            continue
        if (
            quota.max_slice_memory_mb is not None
            and request.gpu_memory_min_mb > quota.max_slice_memory_mb
        ):
            return Reason(
                Code.QUOTA_SLICE_MEMORY,
                {
                    "scope": scope,
                    "key": key,
                    "limit_mb": quota.max_slice_memory_mb,
                    "need_mb": request.gpu_memory_min_mb,
                },
            )
        if (
            quota.max_gpu_hours_week is not None
            and request.gpu_count > 0
            and quota.gpu_hours_week >= quota.max_gpu_hours_week
        ):
            return Reason(
                Code.QUOTA_GPU_HOURS,
                {
                    "scope": scope,
                    "key": key,
                    "limit": float(quota.max_gpu_hours_week),
                    "used": round(float(quota.gpu_hours_week), 1),
                },
            )
        if quota.max_sessions is not None and starting:
            held = quota.sessions + extra.get((scope, quota.key), 0)
            if held >= quota.max_sessions:
                return Reason(
                    Code.QUOTA_SESSIONS, {"scope": scope, "key": key, "limit": quota.max_sessions}
                )
    return None


def utilisation(free: Iterable[FreeSlice], held: Iterable[FreeSlice]) -> float:
    """Share of the pool's GPU capacity (milli) held by sessions."""
    free_milli = sum(s.milli for s in free)
    held_milli = sum(s.milli for s in held)
    total = free_milli + held_milli
    return held_milli / total if total else 0.0


# The first tier the pool's utilisation can refuse at submit: hobby.
FIRST_BLOCKABLE_TIER = 3


def admission_may_block(tier: int) -> bool:
    """Whether :func:`admission_block` can refuse this tier at all (else the caller need
    not work out the pool's utilisation)."""
    return tier >= FIRST_BLOCKABLE_TIER


def admission_block(tier: int, pool_utilisation: float, policy: Policy) -> Reason | None:
    """Why a new request of this tier is refused at submit, or None (only hobby is refused).

    ``Code.POOL_BLOCK`` with ``utilisation`` and ``limit`` as ratios 0..1.
    """
    if admission_may_block(tier) and pool_utilisation >= policy.block_utilisation:
        return Reason(
            Code.POOL_BLOCK,
            {
                "utilisation": round(pool_utilisation, 4),
                "limit": round(policy.block_utilisation, 4),
            },
        )
    return None


def alert_for(pool_utilisation: float, policy: Policy) -> Alert:
    """The pool's alert level for this utilisation (ratios 0..1 in the reason's params)."""
    used = round(pool_utilisation, 4)
    if pool_utilisation >= policy.block_utilisation:
        limit = round(policy.block_utilisation, 4)
        reason = Reason(Code.POOL_BLOCKED, {"utilisation": used, "limit": limit})
        return Alert("block", pool_utilisation, reason)
    if pool_utilisation >= policy.warn_utilisation:
        limit = round(policy.warn_utilisation, 4)
        return Alert(
            "warn", pool_utilisation, Reason(Code.POOL_WARN, {"utilisation": used, "limit": limit})
        )
    return Alert("ok", pool_utilisation, Reason(Code.POOL_OK, {"utilisation": used}))
