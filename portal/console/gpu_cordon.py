"""The console's pool page, sick GPUs (``/console/pool/gpus/<id>/``): an admin uncordons a
cordoned GPU or drains it (its desktops requeued), saying why; both audited by the services
(``scheduling.services.gpu_cordon``). The buttons are in ``console/_cordon_actions.html``."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from portal.console.access import admin_only
from portal.kit.person import actor_of
from scheduling.models import Gpu
from scheduling.services import ServiceError
from scheduling.services.drain import check_node_reason
from scheduling.services.gpu_cordon import do_drain_gpu, do_uncordon_gpu

UNCORDON, DRAIN = "uncordon", "drain"


@admin_only
@require_POST
def gpu_action(request: HttpRequest, gpu_id: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("node"), pk=gpu_id)
    action = request.POST.get("action", "")
    name = _("GPU %(index)s of %(node)s") % {"index": gpu.index, "node": gpu.node.hostname}
    if action not in (UNCORDON, DRAIN):
        messages.error(request, _("Choose Uncordon or Drain."))
        return redirect("console-pool")
    try:
        reason = check_node_reason(request.POST.get("reason", ""))
    except ServiceError as error:
        messages.error(request, f"{name}: {error.message}")
        return redirect("console-pool")
    actor = actor_of(request)
    if action == UNCORDON:
        if do_uncordon_gpu(gpu, actor, reason):
            messages.success(request, _("%(gpu)s is back in service.") % {"gpu": name})
        else:
            messages.warning(
                request, _("Nothing changed: %(gpu)s was not cordoned.") % {"gpu": name}
            )
    else:
        moved = do_drain_gpu(gpu, actor, reason)
        words = ngettext(
            "%(gpu)s is drained: %(count)s desktop went back to the queue.",
            "%(gpu)s is drained: %(count)s desktops went back to the queue.",
            moved,
        )
        messages.success(request, words % {"gpu": name, "count": moved})
    return redirect("console-pool")
