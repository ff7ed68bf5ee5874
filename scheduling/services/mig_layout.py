"""MIG checked and watched (issue 37 items 2 and 3; docs/mig.md).

- :func:`layout_problem`: at every registration (the agent's inventory) a GPU in MIG mode
  has its reported instances checked against the MIG tables
  (``scheduling.engine.mig_check``). A refused layout is stored on the GPU
  (``Gpu.mig_layout_problem``): the GPU offers no slice while it is refused, the console's
  pool page says why (:func:`describe`), and the "MIG layout refused" alert rule raises an
  alert at the next evaluation (:func:`layout_alert_value`).
- :func:`sessions_running_cuda` and :func:`mig_utilisation`: what the agent reports per MIG
  instance (``nodeagent.protocol.SliceMetrics`` in ``Gpu.metrics["slices"]``): a slice with
  a running CUDA process is busy, for the idle rules and the utilisation alerts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.utils.translation import gettext as _

from nodeagent.protocol import GpuInventory

from ..choices import SliceKind
from ..engine import LayoutProblem, Problem, ReportedInstance, check_layout
from ..models import Allocation, Gpu, Slice
from ..models.alerts import Metric

__all__ = [
    "MIG_LAYOUT_RULE",
    "describe",
    "layout_alert_value",
    "layout_problem",
    "mig_utilisation",
    "sessions_running_cuda",
    "slice_running_cuda",
]

# Raised while a GPU's reported MIG layout is refused, resolved once the agent reports one
# the tables allow. Also added to existing pools by migration 0034_mig_layout_check.
MIG_LAYOUT_RULE: dict[str, Any] = dict(
    name="MIG layout refused", metric=Metric.GPU_MIG_LAYOUT, scope="gpu",
    warning=1.0, critical=None, recovery=1.0,
)  # fmt: skip


def layout_problem(gpu: GpuInventory) -> dict[str, Any] | None:
    """Why a reported GPU's MIG layout is refused (as stored on the GPU), None if it is not
    (or the GPU is not in MIG mode)."""
    if not gpu.mig_mode:
        return None
    reported = [ReportedInstance(m.profile, m.start) for m in gpu.mig_instances]
    problem = check_layout(gpu.name, reported)
    if problem is None:
        return None
    return {"code": problem.code, "profile": problem.profile, "start": problem.start}


def describe(problem: Mapping[str, Any] | None, model: str) -> str:
    """The stored problem in the reader's language; "" for none."""
    if not problem:
        return ""
    p = LayoutProblem(
        str(problem.get("code", "")), str(problem.get("profile") or ""), problem.get("start")
    )
    words = {"model": model, "profile": p.profile, "start": p.start}
    sentence = _sentences().get(p.code, _("The reported MIG layout is not one the portal allows."))
    return sentence % words


def _sentences() -> dict[str, str]:
    """Each problem in the reader's language (gettext at the time of asking)."""
    return {
        Problem.UNKNOWN_MODEL: _(
            "MIG is on, but the portal has no MIG table for this GPU model (%(model)s)."
        ),
        Problem.UNKNOWN_PROFILE: _(
            "The portal knows no MIG profile %(profile)s for this GPU model (%(model)s)."
        ),
        Problem.TOO_MANY: _("This GPU allows fewer %(profile)s instances than the node reports."),
        Problem.ENGINES: _("The instances need more media engines than this GPU has."),
        Problem.BAD_START: _("A %(profile)s instance cannot start at memory slice %(start)s."),
        Problem.OVERLAP: _("The %(profile)s instance at memory slice %(start)s overlaps another."),
        Problem.NO_ROOM: _("The reported instances do not fit together on this GPU."),
    }


def layout_alert_value(gpu: Gpu) -> float | None:
    """The alert rule's reading: 1 while the GPU's MIG layout is refused, 0 when accepted."""
    return 1.0 if gpu.mig_layout_problem else 0.0


def _slice_readings(gpu: Gpu) -> dict[str, Mapping[str, Any]]:
    slices = (gpu.metrics or {}).get("slices") or []
    return {str(s.get("uuid")): s for s in slices if isinstance(s, Mapping)}


def slice_running_cuda(gpu: Gpu, device_uuid: str) -> bool:
    """Whether the agent's latest report has a CUDA process running on this MIG device."""
    reading = _slice_readings(gpu).get(device_uuid) or {}
    return bool(reading.get("processes"))


def sessions_running_cuda(session_ids: Iterable[int]) -> set[int]:
    """Those of the sessions whose held MIG instance runs a CUDA process (one query)."""
    holds = Allocation.objects.filter(
        session_id__in=list(session_ids), released_at__isnull=True, slice__kind=SliceKind.MIG
    ).select_related("slice__gpu")
    return {
        a.session_id
        for a in holds
        if a.slice is not None
        and a.session_id is not None
        and slice_running_cuda(a.slice.gpu, a.slice.device_uuid)
    }


def mig_utilisation(gpu: Gpu, slices: Iterable[Slice]) -> float | None:
    """A MIG GPU's compute utilisation (%): its present instances' activity weighted by the
    part of the GPU each is (``Slice.milli``). An instance's activity is DCGM's where the
    agent has it, else 100 while a CUDA process runs on it and 0 while none does; None when
    no instance reports either (an older agent)."""
    readings = _slice_readings(gpu)
    total, known = 0.0, False
    for s in slices:
        reading = readings.get(s.device_uuid)
        if reading is None:
            continue
        activity = reading.get("utilization_pct")
        if activity is None and reading.get("processes") is not None:
            activity = 100.0 if reading["processes"] else 0.0
        if activity is not None:
            total, known = total + float(activity) * s.milli / 1000.0, True
    return round(min(100.0, total), 2) if known else None
