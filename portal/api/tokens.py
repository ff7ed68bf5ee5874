"""API tokens (``/api/v1/auth/``): ask for one with a password, list and revoke your own.

Thin views over scheduling.services.api_tokens; the token endpoint signs in through
``django.contrib.auth.authenticate`` with the request, so django-axes counts its failures and
answers a locked-out name and address 429 (portal.signin.lockout).
"""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import permissions, serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from people.tokens import ApiToken
from portal.kit.person import PersonMixin
from scheduling.services.api_tokens import NAME_MAX, issue_token, revoke_own, tokens_of


class ObtainTokenSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150, trim_whitespace=False)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)
    name = serializers.CharField(max_length=NAME_MAX, required=False, allow_blank=True)


class NameSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX, required=False, allow_blank=True)


class ApiTokenSerializer(serializers.ModelSerializer):
    current = serializers.SerializerMethodField(
        help_text="Whether this request was signed in with this token."
    )

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "current"]

    def get_current(self, token: ApiToken) -> bool:
        auth = self.context.get("auth")
        return isinstance(auth, ApiToken) and auth.pk == token.pk


class IssuedTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(help_text="The token itself; shown this once only.")

    class Meta(ApiTokenSerializer.Meta):
        fields = ["token", *ApiTokenSerializer.Meta.fields]


DETAIL = inline_serializer("Detail", {"detail": serializers.CharField()})
LOCKED = OpenApiResponse(
    inline_serializer(
        "LockedOut",
        {"detail": serializers.CharField(), "retry_after": serializers.IntegerField()},
    ),
    description="Too many failed sign-ins with this user name from this address: try again "
    "after retry_after seconds (also in the Retry-After header).",
)
FIELD_ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description="The request was refused: each field's errors, or non_field_errors, as lists.",
)
REFUSED = OpenApiResponse(
    DETAIL, description="No token, or an unknown, revoked or expired one (the detail says)."
)


def _issued(token: ApiToken, plain: str) -> dict[str, object]:
    return {"token": plain, **ApiTokenSerializer(token, context={"auth": None}).data}


class ObtainTokenView(APIView):
    """A new API token, for a user name and password."""

    authentication_classes: list[type] = []
    permission_classes = [permissions.AllowAny]

    @extend_schema(
        summary="Sign in with a user name and password: a new API token",
        request=ObtainTokenSerializer,
        responses={
            200: IssuedTokenSerializer,
            400: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="Missing fields (each field's errors), or a wrong user name or "
                "password (non_field_errors).",
            ),
            429: LOCKED,
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        form = ObtainTokenSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        user = authenticate(
            request._request,
            username=form.validated_data["username"],
            password=form.validated_data["password"],
        )
        if user is None:
            raise ValidationError(
                {"non_field_errors": [_("Unable to log in with provided credentials.")]}
            )
        token, plain = issue_token(user, form.validated_data.get("name", ""))
        return Response(_issued(token, plain))


class TokenListView(PersonMixin, APIView):
    """The signed-in person's API tokens that still work."""

    @extend_schema(
        summary="Your API tokens that still work, newest first",
        responses={200: ApiTokenSerializer(many=True), 401: REFUSED, 403: DETAIL},
    )
    def get(self, request: Request) -> Response:
        tokens = tokens_of(self.person)
        return Response(ApiTokenSerializer(tokens, many=True, context={"auth": request.auth}).data)

    @extend_schema(
        summary="A new API token, from a signed-in browser (campus sign-in has no password)",
        request=NameSerializer,
        responses={201: IssuedTokenSerializer, 400: FIELD_ERRORS, 401: REFUSED, 403: DETAIL},
    )
    def post(self, request: Request) -> Response:
        if not isinstance(request.successful_authenticator, SessionAuthentication):
            # A token must not renew itself past its lifetime.
            raise PermissionDenied(_("New tokens are issued to a signed-in browser only."))
        form = NameSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        token, plain = issue_token(self.person, form.validated_data.get("name", ""))
        return Response(_issued(token, plain), status=status.HTTP_201_CREATED)


class TokenDetailView(PersonMixin, APIView):
    @extend_schema(
        summary="Revoke one of your API tokens",
        responses={
            204: None,
            401: REFUSED,
            403: DETAIL,
            404: OpenApiResponse(DETAIL, description="You hold no working token by that id."),
        },
    )
    def delete(self, request: Request, token_id: int) -> Response:
        person = self.person
        if not revoke_own(person, token_id):
            raise NotFound(_("You hold no working API token by that id."))
        return Response(status=status.HTTP_204_NO_CONTENT)
