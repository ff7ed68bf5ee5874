"""One simulated campus day: events, the research group, and the cycle that applies each plan.

The simulator plays the portal's part: every ``cycle_s`` simulated seconds, and right after every
arrival, departure or end of a preemption grace, it builds the portal's snapshot
(:class:`.portal.Portal`) and applies the :class:`~scheduling.engine.Plan`: placements start
sessions on exactly the slices named, preemptions put the victims into their grace countdown
(``preempted_for`` set, ``ends_at`` = the deadline), and at the deadline a victim goes back to
the queue with its original ``submitted_at``. Submissions the portal would refuse (hobby above
the block threshold, a quota) are refused here too.
"""

from __future__ import annotations

import heapq
import random
import time
from collections import defaultdict
from datetime import datetime, timedelta

from scheduling.engine import Booking, Code, Plan, Reason, Snapshot, plan

from .pool import build_pool
from .portal import Portal, request_shape, scopes
from .report import hm, note_text
from .state import DAY, TIERS, DayResult, Episode, Run, Wait, nominal_milli
from .workload import HOUR, Config, Job, curve, student_jobs

QUOTA_CODES = frozenset({Code.QUOTA_SLICE_MEMORY, Code.QUOTA_GPU_HOURS, Code.QUOTA_SESSIONS})


class CampusDay:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.pool = build_pool(cfg.layout)
        self.res = DayResult(cfg, self.pool)
        self.start_s = int(cfg.start_h * HOUR)
        self.end_s = int(cfg.end_h * HOUR)
        self.t = self.start_s
        self.free: set[int] = {s.slice_id for s in self.pool.slices}
        self.holder: dict[int, int] = {}
        self.held_since: dict[int, int] = {}
        self.held_milli = 0
        self.running: dict[int, Run] = {}
        self.waiting: dict[int, Wait] = {}
        self.episodes: dict[tuple[int, int], Episode] = {}
        self.events: list[tuple[int, int, str, int, int]] = []
        self.seq = 0
        self.usage_cu_s: dict[tuple[str, str], float] = defaultdict(float)  # (scope, key)
        self.active_users: dict[str, int] = defaultdict(int)
        self.retries: dict[int, int] = defaultdict(int)
        self.nominal: dict[int, int] = {}
        self.bookings = tuple(
            Booking(
                b.booking_id,
                b.course,
                b.seats,
                self.at(int(b.start_h * HOUR)),
                self.at(int(b.end_h * HOUR)),
                request_shape(b.profile, b.course),
            )
            for b in cfg.bookings
        )
        self.portal = Portal(cfg, self.pool, self.bookings)
        self.next_id = 1
        self.jobs: dict[int, Job] = {}
        for job in student_jobs(cfg, self.rng, 100000):
            self._add_job(job)
        self.research_rng = random.Random(cfg.seed * 7919 + 1)

    # -- helpers --

    @staticmethod
    def at(s: int) -> datetime:
        return DAY + timedelta(seconds=s)

    def push(self, t: int, kind: str, sid: int, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, sid, token))

    def _add_job(self, job: Job) -> None:
        self.jobs[job.session_id] = job
        self.nominal[job.session_id] = nominal_milli(self.pool, job.profile)
        end = min(job.submit_s + job.duration_s, self.end_s)
        if job.submit_s < self.end_s:
            self.res.demand[job.user] += self.nominal[job.session_id] * max(0, end - job.submit_s)
        self.push(job.submit_s, "arrive", job.session_id)

    def tier_of(self, job: Job) -> str:
        return TIERS[0] if job.booking_id is not None else TIERS[job.tier]

    def utilisation(self) -> float:
        return self.held_milli / self.pool.capacity_milli

    # -- events --

    def arrive(self, job: Job) -> None:
        if self.active_users[job.user] and job.group != "research":
            self.push(self.t + 600, "arrive", job.session_id)  # one desktop at a time
            return
        block = self.refusal(job)
        if block is not None and block.code in QUOTA_CODES:
            self.res.quota_refused += 1  # it will not clear today: the student gives up
            return
        if block is not None:
            self.res.refused += 1
            self.retries[job.session_id] += 1
            if self.retries[job.session_id] <= self.cfg.hobby_retries:
                self.push(self.t + self.cfg.retry_s, "arrive", job.session_id)
            else:
                self.res.refused_requests += 1
            return
        self.active_users[job.user] += 1
        self.enqueue(job, self.at(self.t), job.duration_s, job.expected_s, episode=0)

    def enqueue(
        self, job: Job, submitted_at: datetime, remaining: int, expected: int, episode: int
    ):
        w = Wait(job, submitted_at, self.t, episode, remaining, max(expected, remaining))
        self.waiting[job.session_id] = w
        if episode == 0:
            self.portal.submitted(job)
        ep = Episode(job.session_id, job.user, self.tier_of(job), self.t, requeued=episode > 0)
        self.episodes[(job.session_id, episode)] = ep
        self.res.episodes.append(ep)
        self.push(self.t + job.patience_s, "abandon", job.session_id, episode)

    def release(self, run: Run) -> None:
        for s in run.slices:
            assert self.holder.get(s.slice_id) == run.job.session_id, "slice not held by it"
            del self.holder[s.slice_id]
            self.free.add(s.slice_id)
            self.res.holds.append(
                (s.slice_id, run.job.session_id, self.held_since.pop(s.slice_id), self.t)
            )
            self.held_milli -= s.milli
        held = self.t - run.started_s
        cu = sum(s.compute_units for s in run.slices)
        for key in scopes(run.job):
            self.usage_cu_s[key] += held * cu
        self.res.received[run.job.user] += self.nominal[run.job.session_id] * held
        del self.running[run.job.session_id]

    def depart(self, sid: int, token: int) -> None:
        run = self.running.get(sid)
        if run is None or run.episode != token or run.end_s != self.t:
            return
        self.release(run)
        self.active_users[run.job.user] -= 1

    def grace_end(self, sid: int, token: int) -> None:
        run = self.running.get(sid)
        if run is None or run.episode != token or run.deadline_s != self.t:
            return
        self.release(run)
        original = run.submitted_at
        self.res.requeues.append(
            {
                "session_id": sid,
                "t": self.t,
                "submitted_at": original.isoformat(),
                "tier": run.job.tier,
            }
        )
        self.enqueue(
            run.job,
            original,
            run.end_s - self.t,
            run.expected_end_s - self.t,
            episode=run.episode + 1,
        )

    def abandon(self, sid: int, token: int) -> None:
        w = self.waiting.get(sid)
        if w is None or w.episode != token:
            return
        del self.waiting[sid]
        self.episodes[(sid, token)].abandoned = True
        self.active_users[w.job.user] -= 1

    # -- the research group --

    def research(self) -> None:
        """The research group tops its jobs up towards the demand curve (then plans).

        Elastic (the default): one job at a time, of a shape that has a spare free slice, and
        only while the last one started at once; a job that has to wait stops the group until
        it starts (the group keeps the rest of its backlog in its own job list).
        """
        cfg = self.cfg
        target = curve(cfg.research_curve, self.t / HOUR) * 1000
        have = sum(
            self.nominal[r] for r, run in self.running.items() if run.job.group == "research"
        )
        have += sum(self.nominal[r] for r, w in self.waiting.items() if w.job.group == "research")
        rng = self.research_rng
        added = False
        while have < target and self.t < self.end_s - HOUR:
            mix = cfg.research_mix
            if cfg.research_elastic:
                if any(w.job.group == "research" for w in self.waiting.values()):
                    break
                spare = self._spare()
                mix = tuple(m for m in mix if spare.get(m[0].name, 0) >= m[0].gpu_count)
                if not mix:
                    break
            profile, _, (lo, hi) = rng.choices(mix, weights=[w for _, w, _ in mix])[0]
            nominal = nominal_milli(self.pool, profile)
            if have + nominal > target + 500:
                break
            duration = int(rng.uniform(lo, hi) * HOUR)
            user = f"phd{rng.randrange(cfg.researchers) + 1:02d}"
            job = Job(
                self.next_id, user, "research", 1, profile, self.t, duration, duration, 10 * HOUR,
                department="cs",
            )  # fmt: skip
            if self.refusal(job) is not None:
                self.res.quota_refused += 1  # the group waits for its quota to clear
                break
            self.next_id += 1
            self.res.research_jobs += 1
            self.jobs[job.session_id] = job
            self.nominal[job.session_id] = nominal
            self.res.demand[user] += nominal * max(0, min(self.t + duration, self.end_s) - self.t)
            self.active_users[user] += 1
            self.enqueue(job, self.at(self.t), duration, duration, episode=0)
            have += nominal
            added = True
            if cfg.research_elastic:
                self.cycle()  # an arrival: the portal plans at once
                added = False
        if added:
            self.cycle()
        self.res.peak_research_milli = max(
            self.res.peak_research_milli,
            sum(
                s.milli
                for run in self.running.values()
                if run.job.group == "research"
                for s in run.slices
            ),
        )

    def _spare(self) -> dict[str, int]:
        """Per research profile: free slices that fit it, less those the queue will take."""
        free: dict[tuple[str, int], int] = defaultdict(int)
        for x in self.pool.slices:
            if x.slice_id in self.free:
                free[(x.kind, x.memory_mb)] += 1
        types = sorted(free, key=lambda k: (k[1], k[0]))
        for w in self.waiting.values():  # each waiting request takes its smallest fitting type
            p, need = w.job.profile, w.job.profile.gpu_count
            for key in types:
                while need and key[0] in p.kinds and key[1] >= p.memory_min_mb and free[key]:
                    free[key] -= 1
                    need -= 1
        return {
            p.name: sum(n for (k, m), n in free.items() if k in p.kinds and m >= p.memory_min_mb)
            for p, _, _ in self.cfg.research_mix
        }

    # -- one cycle --

    def snapshot(self) -> Snapshot:
        """The snapshot the portal would build now."""
        return self.portal.snapshot(
            self.t, self.running.values(), self.waiting.values(), self.free, self.usage_cu_s
        )

    def refusal(self, job: Job) -> Reason | None:
        """Why the portal would refuse the job's submission now, or None."""
        usage = dict(self.usage_cu_s)
        holding: dict[tuple[str, str], int] = defaultdict(int)
        for run in self.running.values():
            cu = sum(s.compute_units for s in run.slices)
            for key in scopes(run.job):
                usage[key] = usage.get(key, 0.0) + cu * (self.t - run.started_s)
                holding[key] += 1
        return self.portal.refusal(job, self.utilisation(), usage, holding)

    def cycle(self) -> None:
        snap = self.snapshot()
        now = self.at(self.t)
        t0 = time.perf_counter()
        result = plan(snap, now)
        self.res.plan_s += time.perf_counter() - t0
        self.res.cycles += 1
        self.apply(result)

    def apply(self, result: Plan) -> None:
        """Apply the plan as the portal does (asserting what the portal's database would)."""
        self.res.notes.update(note_text(n) for n in result.notes)
        by_id = {s.slice_id: s for s in self.pool.slices}
        for p in result.placements:
            w = self.waiting.pop(p.session_id)
            ids = (*p.slice_ids, *(x for _, xs in p.others for x in xs))
            slices = tuple(by_id[x] for x in ids)
            assert len(slices) == w.job.profile.gpu_count, "placement of the wrong size"
            assert len({s.gpu_id for s in slices}) == len(slices), "two slices of one GPU"
            for s in slices:
                assert s.slice_id in self.free, f"slice {s.slice_id} placed while held"
                assert s.kind in w.job.profile.kinds and s.memory_mb >= w.job.profile.memory_min_mb
                self.free.discard(s.slice_id)
                self.holder[s.slice_id] = p.session_id
                self.held_since[s.slice_id] = self.t
                self.held_milli += s.milli
            run = Run(
                w.job,
                p.node_id,
                slices,
                self.t,
                self.t + w.remaining_s,
                self.t + w.expected_left_s,
                w.episode,
                w.submitted_at,
            )
            self.running[p.session_id] = run
            self.push(run.end_s, "depart", p.session_id, w.episode)
            ep = self.episodes[(p.session_id, w.episode)]
            ep.started_s = self.t
            if w.first_eta is not None:
                ep.eta_s = int((w.first_eta - DAY).total_seconds())
        for pre in result.preemptions:
            run = self.running[pre.victim_id]
            assert run.preempted_for is None, "preempted twice"
            run.preempted_for = pre.for_session_id
            run.deadline_s = int((pre.deadline - DAY).total_seconds())
            self.res.preemptions.append(
                {
                    "victim": pre.victim_id,
                    "victim_tier": run.job.tier,
                    "victim_booking": run.job.booking_id,
                    "victim_started_s": run.started_s,
                    "victim_end_s": run.end_s,
                    "for": pre.for_session_id,
                    "t": self.t,
                    "deadline_s": run.deadline_s,
                }
            )
            if run.deadline_s < run.end_s:
                self.push(run.deadline_s, "grace_end", pre.victim_id, run.episode)
        for entry in result.queue:
            waiting = self.waiting.get(entry.session_id)
            if waiting is not None and waiting.first_eta is None and entry.eta is not None:
                waiting.first_eta = entry.eta

    def sample(self) -> None:
        held: dict[str, int] = defaultdict(int)
        for run in self.running.values():
            held[run.job.group] += sum(s.milli for s in run.slices)
        free: dict[str, int] = defaultdict(int)
        for s in self.pool.slices:
            if s.slice_id in self.free:
                free[f"{s.kind}{s.memory_mb // 1000}"] += 1
        queued: dict[str, int] = defaultdict(int)
        for w in self.waiting.values():
            queued[f"{w.job.group}/{w.job.profile.name}"] += 1
        self.res.timeline.append(
            {
                "t": hm(self.t / HOUR),
                "held_milli": self.held_milli,
                "held_by_group": dict(sorted(held.items())),
                "free_slices": dict(sorted(free.items())),
                "queued": dict(sorted(queued.items())),
                "grace": sum(1 for r in self.running.values() if r.preempted_for is not None),
            }
        )

    # -- the loop --

    def run(self) -> DayResult:
        t_wall = time.perf_counter()
        next_tick = self.start_s
        next_sample = self.start_s
        handlers = {
            "arrive": lambda sid, tok: self.arrive(self.jobs[sid]),
            "depart": self.depart,
            "grace_end": self.grace_end,
            "abandon": self.abandon,
        }
        while True:
            t_next = min(next_tick, self.events[0][0] if self.events else next_tick)
            if t_next >= self.end_s:
                break
            t_next = max(t_next, self.t)
            self.res.held_milli_s += self.held_milli * (t_next - self.t)
            self.t = t_next
            trigger = False
            while self.events and self.events[0][0] <= self.t:
                _, _, kind, sid, token = heapq.heappop(self.events)
                if self.events_before_start(kind, sid):
                    continue
                handlers[kind](sid, token)
                trigger = trigger or self.cfg.event_cycles
            if self.t >= next_tick:
                next_tick += self.cfg.cycle_s
                self.cycle()
                self.research()
            elif trigger:
                self.cycle()
            if self.t >= next_sample:
                self.sample()
                next_sample += 15 * 60
        self.res.held_milli_s += self.held_milli * (self.end_s - self.t)
        self.t = self.end_s
        for run in list(self.running.values()):
            self.release(run)
        self.res.span_s = self.end_s - self.start_s
        self.res.wall_s = time.perf_counter() - t_wall
        return self.res

    def events_before_start(self, kind: str, sid: int) -> bool:
        """Arrivals before the day's start are moved to it (the portal queues them overnight)."""
        if kind == "arrive" and self.t < self.start_s:
            self.push(self.start_s, kind, sid)
            return True
        return False


def simulate(cfg: Config | None = None) -> DayResult:
    day = CampusDay(cfg or Config())
    return day.run()
