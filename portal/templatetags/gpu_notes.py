"""What a desktop's page says about its GPU (``portal/_gpu_notes.html``):
``{{ session.profile|cpu_torch_on_gpu }}`` is true for a GPU profile whose image holds
PyTorch's CPU build (nodeagent.software); ``{{ session|on_cordoned_gpu }}`` while a GPU the
desktop holds is cordoned for ill health (scheduling.services.gpu_cordon)."""

from __future__ import annotations

from django import template

from nodeagent.software import torch_build
from scheduling.models import DesktopProfile, Session
from scheduling.services.gpu_cordon import holds_cordoned_gpu

register = template.Library()


@register.filter
def cpu_torch_on_gpu(profile: DesktopProfile) -> bool:
    return profile.gpu_count > 0 and torch_build(profile.image) == "cpu"


@register.filter
def on_cordoned_gpu(session: Session) -> bool:
    return holds_cordoned_gpu(session.pk)
