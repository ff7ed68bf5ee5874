"""Whether a desktop's PyTorch computes on its GPU: ``{{ session.profile|cpu_torch_on_gpu }}``
is true for a GPU profile whose image holds PyTorch's CPU build (nodeagent.software)."""

from __future__ import annotations

from django import template

from nodeagent.software import torch_build
from scheduling.models import DesktopProfile

register = template.Library()


@register.filter
def cpu_torch_on_gpu(profile: DesktopProfile) -> bool:
    return profile.gpu_count > 0 and torch_build(profile.image) == "cpu"
