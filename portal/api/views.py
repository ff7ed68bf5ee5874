"""The user API (``/api/v1/``): thin viewsets that call the scheduling services."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, prefetch_related_objects
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from people.tokens import ApiToken
from portal.api.schema import ErrorDetailSerializer
from portal.api.serializers import (
    DesktopProfileSerializer,
    NodeSerializer,
    PoolSerializer,
    SessionCreateSerializer,
    SessionSerializer,
    TicketRequestSerializer,
    TicketSerializer,
)
from portal.kit.client_address import client_address_of
from portal.kit.person import PersonMixin
from scheduling.events import payload_reads
from scheduling.models import Allocation, DesktopProfile, Gpu, Node, Session
from scheduling.models.sessions import SessionQuerySet
from scheduling.services.extend import do_extend
from scheduling.services.feasibility import unavailable_words
from scheduling.services.gateway_tickets import TOKEN_MARKER, check_gateway_open, do_issue_ticket
from scheduling.services.home_transfers import check_transfer_on, do_issue_transfer_ticket
from scheduling.services.idle import do_resume
from scheduling.services.pool import pool_state, pool_utilisation
from scheduling.services.sessions import check_submit, do_stop, do_submit

# A person's submits and stops are rate limited (scheduling/services/rate_limits.py).
RATE_LIMITED = OpenApiResponse(
    ErrorDetailSerializer,
    description="Too many requests in a short time: the detail says when to try again, in "
    "seconds, as does the Retry-After header. Nothing was done.",
)


class DesktopProfileViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = DesktopProfileSerializer
    queryset = DesktopProfile.objects.filter(active=True)

    def get_serializer_context(self) -> dict[str, Any]:
        # Which profiles no node could ever run, read once for the whole list.
        return {
            **super().get_serializer_context(),
            "unavailable": unavailable_words(self.get_queryset(), timezone.now()),
        }


def _shown(sessions: SessionQuerySet) -> SessionQuerySet:
    """What a session's answer reads beside it."""
    return payload_reads(sessions)


class SessionViewSet(
    PersonMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = SessionSerializer

    def get_queryset(self):
        return _shown(Session.objects.visible_to(self.request.user))

    def get_object(self) -> Session:
        """One session: the person's own found without building the grants query (a client
        polling its own desktop at a class start: that query cost most of the answer's CPU),
        else anything :meth:`get_queryset` lets them read (admins, guardian grants)."""
        pk = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        # By its id: no sort (``first()`` sorts, and Django's sort over this many selected
        # columns cost a poll a quarter of its CPU).
        own = _shown(Session.objects.all()).own(self.request.user, pk)
        if own is None:
            return super().get_object()
        self.check_object_permissions(self.request, own)
        return own

    def get_serializer_class(self):
        return SessionCreateSerializer if self.action == "create" else SessionSerializer

    @extend_schema(
        request=SessionCreateSerializer, responses={201: SessionSerializer, 429: RATE_LIMITED}
    )
    def create(self, request: Request, *args, **kwargs) -> Response:
        form = SessionCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        submit = check_submit(
            self.person,
            form.validated_data["profile"],
            form.validated_data["purpose"],
            form.validated_data.get("course") or None,
        )
        session = do_submit(self.person, submit, by_person=True)
        # Their own session, just created, as it was stored (not placed yet: no node).
        prefetch_related_objects([session], "allocations__slice__gpu")
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: SessionSerializer, 429: RATE_LIMITED})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        session = self.get_object()
        do_stop(self.person, session, by_person=True)
        return Response(SessionSerializer(self.get_queryset().get(pk=session.pk)).data)

    @extend_schema(request=None, responses={200: SessionSerializer})
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str | None = None) -> Response:
        """One more step of the profile's time, or 409 saying why not (docs/lifecycle.md)."""
        session = self.get_object()
        do_extend(self.person, session.pk)
        return Response(SessionSerializer(self.get_queryset().get(pk=session.pk)).data)

    @extend_schema(
        request=TicketRequestSerializer,
        responses={
            201: TicketSerializer,
            404: OpenApiResponse(
                ErrorDetailSerializer,
                description="No such desktop of yours, or (sound) the desktop serves no sound.",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def ticket(self, request: Request, pk: str | None = None) -> Response:
        """A ticket to the running desktop's screen or sound on its node's gateway, for its
        owner and admins (403 for others who may see it, 409 when it does not run); good for
        30 seconds and one opening (docs/api.md)."""
        form = TicketRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        purpose = form.validated_data["purpose"]
        if purpose in ("upload", "download"):
            transfer = check_transfer_on(
                self.person,
                int(pk or 0),
                purpose,
                form.validated_data["path"],
                size=form.validated_data["size"],
            )
            issued = do_issue_transfer_ticket(
                self.person, transfer, login_session_of(request), client_address_of(request)
            )
            return Response(TicketSerializer(issued).data, status=status.HTTP_201_CREATED)
        session = check_gateway_open(self.person, int(pk or 0), purpose)
        issued = do_issue_ticket(
            self.person, session, purpose, login_session_of(request), client_address_of(request)
        )
        return Response(TicketSerializer(issued).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: SessionSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Requeue a suspended session with its age kept, or 409."""
        session = self.get_object()
        do_resume(self.person, session.pk)
        return Response(SessionSerializer(self.get_queryset().get(pk=session.pk)).data)


def login_session_of(request: Request) -> str:
    """What a ticket is issued under: the page's login session, or the API token's marker."""
    if isinstance(request.auth, ApiToken):
        return f"{TOKEN_MARKER}{request.auth.pk}"
    return request._request.session.session_key or ""


class PoolView(APIView):
    """Nodes, GPUs and slices with their use. Admins only."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(responses={200: PoolSerializer})
    def get(self, request: Request) -> Response:
        held = set(
            Allocation.objects.filter(released_at=None, slice__isnull=False).values_list(
                "slice_id", flat=True
            )
        )
        nodes = Node.objects.prefetch_related(
            Prefetch("gpus", queryset=Gpu.objects.prefetch_related("slices"))
        )
        data = NodeSerializer(nodes, many=True, context={"held": held}).data
        total = sum(len(g["slices"]) for n in data for g in n["gpus"])
        busy = pool_utilisation()
        levels, level = pool_state()  # the "Pool usage" alert rule: the admission threshold
        return Response(
            {
                "nodes": data,
                "slices_total": total,
                "slices_in_use": len(held),
                "utilisation": round(busy, 4),
                "alert_level": level,
                "warn_percent": levels.warn_percent,
                "block_percent": levels.block_percent,
            }
        )
