"""What a desktop is billed for: never more than the slice its profile asked for (issue 38).

A desktop may hold a bigger slice than its profile needs: a whole GPU, taken because no
smaller fitting slice was free (the engine keeps whole GPUs for work that needs them while
one is). The person pays for what they asked, not for what was left. Per GPU held, the
*billed part* is the smaller (by milli) of

- the slice held, and
- the *asked slice*: the smallest present slice on a present GPU of the same model whose
  kind the profile allows, with at least the profile's GPU memory minimum and its
  ``compute_min`` CU (the scheduler's own fit: kind, memory, compute).

A profile that allows only whole GPUs, or needs one's memory, asks for a whole GPU and is
billed one. Its compute units are the GPU's CU times its part (``milli / 1000``), as the
snapshot gives slices theirs. The session's ``compute_units`` (set at placement), and its
usage record's ``slice_kind``, ``mig_profile``, ``gpu_share`` and ``compute_units``, are
the billed parts: prices, GPU-hours and CU-hours, and the GPU-hour quotas (which count
``compute_units`` x hours, ``services.usage``) all read these. Where it ran stays in the
record's ``gpu_model``, ``node_hostname`` and ``slices``, and in the session's holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..models import DesktopProfile, Slice


@dataclass(frozen=True)
class Ask:
    """What a profile asks of each GPU: the kinds it allows, memory and compute at least."""

    kinds: tuple[str, ...]
    memory_min_mb: int
    compute_min: float

    @classmethod
    def of(cls, profile: DesktopProfile) -> Ask:
        return cls(tuple(profile.allowed_kinds), profile.gpu_memory_min_mb, profile.compute_min)


@dataclass(frozen=True)
class Part:
    """One GPU's part held or billed: its slice kind, MIG profile ('' if none), milli of
    the GPU and compute units."""

    kind: str
    profile: str
    milli: int
    units: float


def part_of(s: Slice) -> Part:
    """A slice's part (its GPU loaded)."""
    return Part(s.kind, s.profile, s.milli, slice_units(s.gpu.compute_units, s.milli))


def slice_units(gpu_units: float, milli: int) -> float:
    """The compute units of ``milli`` of a GPU of ``gpu_units`` CU."""
    return round(gpu_units * milli / 1000, 4)


class Asked:
    """The asked slice per GPU model and ask (one query each, kept for this object's life:
    make one per batch)."""

    def __init__(self) -> None:
        self.known: dict[tuple[str, Ask], Part | None] = {}

    def smallest(self, model: str, ask: Ask) -> Part | None:
        key = (model, ask)
        if key not in self.known:
            # The columns alone, smallest first (an agent's report batch asks this of a
            # model with a class's worth of slices: no Slice and GPU objects built for them).
            rows = (
                Slice.objects.filter(
                    present=True,
                    gpu__present=True,
                    gpu__model=model,
                    kind__in=list(ask.kinds),
                    memory_mb__gte=ask.memory_min_mb,
                )
                .order_by("milli", "memory_mb", "pk")
                .values_list("kind", "profile", "milli", "gpu__compute_units")
            )
            self.known[key] = next(
                (
                    Part(kind, profile, milli, slice_units(units, milli))
                    for kind, profile, milli, units in rows
                    if slice_units(units, milli) >= ask.compute_min
                ),
                None,
            )
        return self.known[key]

    def billed(self, held: Iterable[tuple[str, Part]], ask: Ask) -> list[Part]:
        """The billed part of each ``(GPU model, part held)``: the asked slice where it is
        smaller than what is held."""
        out = []
        for model, part in held:
            small = self.smallest(model, ask)
            out.append(small if small is not None and small.milli < part.milli else part)
        return out


def units(parts: Sequence[Part]) -> float:
    """The compute units of the parts, together."""
    return round(sum(p.units for p in parts), 4)
