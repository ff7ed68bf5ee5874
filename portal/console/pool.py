"""The console's pool page (``/console/pool/``): nodes, GPUs, slices and who holds them, the
MIG layout drawn; cordon, uncordon and drain with a reason, a node's gateway key rotated;
join tokens shown once.

The pool section is one template (``console/_pool_section.html``), rendered in the page and
by the fragment URL that ``static/deskpool/console_pool.js`` reloads when something changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.console.access import admin_only
from portal.console.pool_forms import (
    CORDON,
    DRAIN,
    ROTATE_KEY,
    UNCORDON,
    UNDRAIN,
    JoinTokenForm,
    NodeActionForm,
)
from portal.kit.person import actor_of
from scheduling.choices import NODE_BOUND_STATES
from scheduling.models import Allocation, Gpu, JoinToken, Node, Session, Slice, hash_token
from scheduling.services.drain import do_drain, do_end_drain
from scheduling.services.gateway_keys import do_rotate_gateway_key
from scheduling.services.health import do_clear_cordon, do_cordon
from scheduling.services.mig_layout import describe
from scheduling.services.nodes import do_create_join_token, do_revoke_join_token, join_token_state

TOKENS_SHOWN = 50


@dataclass
class SliceRow:
    slice: Slice
    session: Session | None  # the session holding it, if any
    warm: bool  # held by a desktop started ahead for a class

    @property
    def held(self) -> bool:
        return self.session is not None or self.warm

    @property
    def label(self) -> str:
        return self.slice.profile or self.slice.get_kind_display()


@dataclass
class GpuRow:
    gpu: Gpu
    slices: list[SliceRow] = field(default_factory=list)

    @property
    def metrics(self) -> dict[str, Any]:
        return self.gpu.metrics or {}

    @property
    def memory_used_ratio(self) -> float | None:
        used = self.metrics.get("memory_used_mb")
        return used / self.gpu.memory_mb if used is not None and self.gpu.memory_mb else None

    @property
    def mig_refusal(self) -> str:
        """Why its reported MIG layout is refused, in the reader's language; "" if it is not."""
        return describe(self.gpu.mig_layout_problem, self.gpu.model)


@dataclass
class NodeRow:
    node: Node
    healthy: bool
    sessions: int
    gpus: list[GpuRow] = field(default_factory=list)

    @property
    def drain_complete(self) -> bool:
        return self.node.draining_since is not None and self.sessions == 0


def pool_rows() -> list[NodeRow]:
    """Every node with its present GPUs and slices, and who holds each slice now."""
    now = timezone.now()
    holds: dict[int, Allocation] = {
        a.slice_id: a
        for a in Allocation.objects.filter(released_at=None, slice__isnull=False).select_related(
            "session__user", "session__profile"
        )
        if a.slice_id is not None
    }
    bound: dict[int, int] = {}
    for node_id in Session.objects.filter(state__in=NODE_BOUND_STATES).values_list(
        "node_id", flat=True
    ):
        bound[node_id] = bound.get(node_id, 0) + 1
    rows = {
        n.pk: NodeRow(n, n.is_healthy(now) and n.draining_since is None, bound.get(n.pk, 0))
        for n in Node.objects.all()
    }
    gpus: dict[int, GpuRow] = {}
    for gpu in Gpu.objects.filter(present=True).order_by("node__hostname", "index"):
        gpus[gpu.pk] = GpuRow(gpu)
        rows[gpu.node_id].gpus.append(gpus[gpu.pk])
    for s in Slice.objects.filter(present=True, gpu__in=list(gpus)).order_by("gpu_id", "slot"):
        hold = holds.get(s.pk)
        gpus[s.gpu_id].slices.append(
            SliceRow(s, hold.session if hold else None, bool(hold and hold.warm_id))
        )
    return list(rows.values())


def token_rows() -> list[tuple[JoinToken, str]]:
    now = timezone.now()
    tokens = JoinToken.objects.select_related("used_by").order_by("-created_at")[:TOKENS_SHOWN]
    return [(token, join_token_state(token, now)) for token in tokens]


def _page(request: HttpRequest, **forms: Any) -> HttpResponse:
    context: dict[str, Any] = {
        "rows": pool_rows(),
        "tokens": token_rows(),
        "token_form": forms.pop("token_form", None) or JoinTokenForm(),
        "action_form": forms.pop("action_form", None) or NodeActionForm(),
        "page_config": {
            "fragment_url": reverse("console-pool-fragment"),
        },
    }
    status = 400 if context["action_form"].errors or context["token_form"].errors else 200
    return render(request, "console/pool.html", context, status=status)


@admin_only
def pool(request: HttpRequest) -> HttpResponse:
    return _page(request)


@admin_only
def pool_fragment(request: HttpRequest) -> HttpResponse:
    return render(request, "console/_pool_section.html", {"rows": pool_rows()})


@admin_only
@require_POST
def node_action(request: HttpRequest) -> HttpResponse:
    form = NodeActionForm(request.POST)
    if not form.is_valid():
        return _page(request, action_form=form)
    data = form.cleaned_data
    node, action, reason = data["node"], data["action"], data["reason"]
    actor = actor_of(request)
    if action == DRAIN:
        done = do_drain(node, actor, reason, data["deadline_at"])
    elif action == CORDON:
        done = do_cordon(node, actor, reason)
    elif action == UNCORDON:
        done = do_clear_cordon(node, actor, reason)
    elif action == ROTATE_KEY:
        do_rotate_gateway_key(node, actor, reason)
        done = True
    else:
        done = do_end_drain(node, actor, reason)
    words = {
        CORDON: _("%(node)s is cordoned: nothing new is placed on it."),
        UNCORDON: _("%(node)s is back in service."),
        DRAIN: _("%(node)s is draining."),
        UNDRAIN: _("%(node)s is no longer draining."),
        ROTATE_KEY: _("%(node)s signs desktop tickets with a new key from now on."),
    }
    if done:
        messages.success(request, words[action] % {"node": node.hostname})
    else:
        messages.warning(
            request, _("Nothing changed: %(node)s was already so.") % {"node": node.hostname}
        )
    return redirect("console-pool")


@admin_only
@require_POST
def create_token(request: HttpRequest) -> HttpResponse:
    form = JoinTokenForm(request.POST)
    if not form.is_valid():
        return _page(request, token_form=form)
    data = form.cleaned_data
    plain = do_create_join_token(
        data["hostname"],
        actor=actor_of(request),
        expires_at=data["expires_at"],
        may_replace=data["may_replace"],
    )
    token = JoinToken.objects.get(token_hash=hash_token(plain))
    context = {
        "plain": plain,
        "token": token,
        "portal_url": request.build_absolute_uri("/").rstrip("/"),
    }
    # Shown once: this answer is the only place the plain token appears, and is not kept.
    response = render(request, "console/pool_token_created.html", context)
    response["Cache-Control"] = "no-store"
    return response


@admin_only
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(JoinToken, pk=token_id)
    if do_revoke_join_token(token, actor_of(request)):
        messages.success(request, _("The join token was revoked."))
    else:
        messages.warning(request, _("That join token was already used or revoked."))
    return redirect("console-pool")
