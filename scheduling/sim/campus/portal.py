"""The portal's part: the snapshot its scheduling cycle would build, and its checks at submit.

Mirrors ``scheduling/services`` (snapshot building, submit admission) without Django, so the
engine scores the simulated day exactly as it scores the portal's pool:

- ``nodes``, ``free_slices``, ``running``, ``queue`` and ``bookings`` from the day's state;
- ``racks``: the racks with a power budget (``Config.rack_budgets_w``), drawing what their
  busy slices draw;
- ``quotas``: ``Config.quotas`` with what is in use now (sessions holding capacity, CU-hours
  used so far), a ``*`` row expanded to one quota per member of its scope in the queue;
- ``workload``: the catalogue (:data:`.workload.CATALOGUE`), each profile weighted by its
  requests so far plus one, its GPU part the smallest pool slice that fits it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from scheduling.engine import (
    Booking,
    FreeSlice,
    QueuedRequest,
    Quota,
    Reason,
    RunningSession,
    Snapshot,
    TargetShape,
    admission_block,
    quota_block,
)

from .pool import Pool, node_states, racks
from .state import DAY, Run, Wait
from .workload import CATALOGUE, HOUR, Config, Job, Profile

Usage = Mapping[tuple[str, str], float]  # (scope, key) -> CU-seconds used so far


def scopes(job: Job) -> tuple[tuple[str, str], ...]:
    """The (scope, key) pairs of the job's owner that quotas and usage are counted by."""
    return (("user", job.user), ("course", job.course), ("department", job.department))


def request_shape(
    p: Profile, course: str, tier: int = 2, user: str = "", department: str = ""
) -> QueuedRequest:
    """A request of the profile (a booking's seat shape, or a probe at submit)."""
    return QueuedRequest(
        0, tier, DAY, p.gpu_count, p.memory_min_mb, p.kinds, p.cpus, p.memory_mb,
        user=user, course=course, department=department,
    )  # fmt: skip


class Portal:
    """The portal as the simulated day sees it: catalogue, quota rows, bookings, requests."""

    def __init__(self, cfg: Config, pool: Pool, bookings: tuple[Booking, ...]) -> None:
        self.cfg = cfg
        self.pool = pool
        self.bookings = bookings
        self.rows = {(q.scope, q.key): q for q in cfg.quotas}
        self.requests: dict[str, int] = defaultdict(int)  # profile name -> sessions submitted
        self.catalogue = list(dict.fromkeys(CATALOGUE))
        known = {p.name for p in self.catalogue}
        extra = [b.profile for b in cfg.bookings] + [p for p, _, _ in cfg.research_mix]
        self.catalogue += [p for p in dict.fromkeys(extra) if p.name not in known]
        self.gpu_milli = {p.name: self._smallest_milli(p) for p in self.catalogue}

    def _smallest_milli(self, p: Profile) -> int:
        fitting = [
            s.milli
            for s in self.pool.slices
            if s.kind in p.kinds and s.memory_mb >= p.memory_min_mb
        ]
        return min(fitting, default=1000) if p.gpu_count else 0

    # -- at submit --

    def submitted(self, job: Job) -> None:
        """A session was created for the job (the workload mix counts it)."""
        self.requests[job.profile.name] += 1

    def refusal(
        self, job: Job, utilisation: float, usage: Usage, holding: Mapping[tuple[str, str], int]
    ) -> Reason | None:
        """Why the portal refuses the submission now: the pool's block threshold (hobby), or a
        quota that cannot clear soon (GPU-hours, largest slice)."""
        if job.booking_id is None:
            block = admission_block(job.tier, utilisation, self.cfg.policy)
            if block is not None:
                return block
        if not self.rows:
            return None
        probe = request_shape(job.profile, job.course, job.tier, job.user, job.department)
        quotas = {}
        for scope, key in scopes(job):
            row = self.rows.get((scope, key)) or self.rows.get((scope, "*"))
            if key and row is not None:
                quotas[(scope, key)] = self._quota(row, scope, key, usage, holding)
        return quota_block(probe, quotas, starting=False)

    # -- the cycle's snapshot --

    def snapshot(
        self,
        t: int,
        running: Iterable[Run],
        waiting: Iterable[Wait],
        free: set[int],
        usage: dict[tuple[str, str], float],
    ) -> Snapshot:
        """The snapshot at ``t`` (seconds since midnight); ``usage`` is what ended sessions
        used, by (scope, key), in CU-seconds."""
        now_usage = dict(usage)
        cpus: dict[int, float] = defaultdict(float)
        mem: dict[int, int] = defaultdict(int)
        holding: dict[tuple[str, str], int] = defaultdict(int)
        sessions = []
        busy: list[FreeSlice] = []
        for run in running:
            cpus[run.node_id] += run.job.profile.cpus
            mem[run.node_id] += run.job.profile.memory_mb
            cu = sum(s.compute_units for s in run.slices)
            for key in scopes(run.job):
                now_usage[key] = now_usage.get(key, 0.0) + cu * (t - run.started_s)
                holding[key] += 1
            busy.extend(run.slices)
            ends = run.expected_end_s
            if run.preempted_for is not None and run.deadline_s is not None:
                ends = run.deadline_s  # in its grace: it stops at the deadline
            sessions.append(
                RunningSession(
                    run.job.session_id,
                    run.job.tier,
                    run.node_id,
                    run.slices,
                    run.job.profile.cpus,
                    run.job.profile.memory_mb,
                    _at(run.started_s),
                    _at(ends),
                    user=run.job.user,
                    course=run.job.course,
                    department=run.job.department,
                    booking_id=run.job.booking_id,
                    preempted_for=run.preempted_for,
                )
            )
        queue = tuple(
            QueuedRequest(
                w.job.session_id,
                w.job.tier,
                w.submitted_at,
                w.job.profile.gpu_count,
                w.job.profile.memory_min_mb,
                w.job.profile.kinds,
                w.job.profile.cpus,
                w.job.profile.memory_mb,
                user=w.job.user,
                course=w.job.course,
                department=w.job.department,
                booking_id=w.job.booking_id,
                duration_s=w.expected_left_s,
                usage_gpu_hours=now_usage.get(("user", w.job.user), 0.0) / HOUR,
            )
            for w in sorted(waiting, key=lambda w: w.job.session_id)
        )
        return Snapshot(
            nodes=node_states(self.pool, cpus, mem),
            free_slices=tuple(s for s in self.pool.slices if s.slice_id in free),
            queue=queue,
            running=tuple(sessions),
            bookings=self.bookings,
            quotas=self.quotas(queue, now_usage, holding),
            racks=racks(self.pool, self.cfg.rack_budgets_w, busy),
            policy=self.cfg.policy,
            workload=self.workload(),
        )

    def workload(self) -> tuple[TargetShape, ...]:
        """The catalogue, each profile weighted by its requests so far plus one, normalised."""
        shapes = [
            TargetShape(
                int(p.cpus * 1000),
                self.gpu_milli[p.name],
                p.gpu_count,
                None,
                float(self.requests.get(p.name, 0) + 1),
            )
            for p in self.catalogue
        ]
        total = sum(s.weight for s in shapes) or 1.0
        return tuple(
            TargetShape(s.cpu_milli, s.gpu_milli, s.num_gpu, None, s.weight / total) for s in shapes
        )

    def quotas(
        self,
        queue: tuple[QueuedRequest, ...],
        usage: Usage,
        holding: Mapping[tuple[str, str], int],
    ) -> tuple[Quota, ...]:
        """Quota rows with what is in use; a ``*`` row becomes one quota per member it covers."""
        keys: set[tuple[str, str]] = set()
        for r in queue:
            keys |= {("user", r.user), ("course", r.course), ("department", r.department)}
        out = []
        for (scope, key), row in self.rows.items():
            covered = [key] if key != "*" else sorted(
                k for sc, k in keys if sc == scope and k and (scope, k) not in self.rows
            )  # fmt: skip
            for member in covered:
                out.append(self._quota(row, scope, member, usage, holding))
        return tuple(out)

    @staticmethod
    def _quota(
        row: Quota, scope: str, key: str, usage: Usage, holding: Mapping[tuple[str, str], int]
    ) -> Quota:
        return Quota(
            scope,
            key,
            row.max_sessions,
            row.max_gpu_hours_week,
            row.max_slice_memory_mb,
            holding.get((scope, key), 0),
            usage.get((scope, key), 0.0) / HOUR,
        )


def _at(s: int) -> datetime:
    return DAY + timedelta(seconds=s)
