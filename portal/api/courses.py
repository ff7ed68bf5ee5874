"""The courses API: the courses a person teaches or assists, their roster, TAs and class.

Access follows ``scheduling.services.teaching.course_role``: a course the asker has no role
on is a 404;
an action their role does not allow is a 403.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.fields import ChoiceField
from portal.api.serializers import SessionSerializer
from portal.kit.person import PersonMixin
from scheduling.events import session_payload
from scheduling.models import default_profile_of
from scheduling.services import ServiceError
from scheduling.services.classroom import class_sessions, do_start_all, do_stop_all
from scheduling.services.roster import MAX_BYTES, RosterErrors, check_roster, do_import_roster
from scheduling.services.teaching import (
    TA_PERMISSIONS,
    CourseRole,
    check_ta,
    course_role,
    course_tas,
    do_remove_ta,
    do_set_ta,
    role_by_code,
    teaching_courses,
)


class CourseSerializer(serializers.Serializer):
    code = serializers.CharField()
    title = serializers.CharField()
    department = serializers.CharField()
    default_profile = serializers.IntegerField(allow_null=True, source="default_profile_id")
    students = serializers.IntegerField()
    role = serializers.CharField(help_text="instructor (or admin) | ta")
    permissions = serializers.ListField(child=serializers.CharField())


def _course_data(role: CourseRole) -> dict[str, object]:
    course = role.course
    return CourseSerializer(
        {
            "code": course.code,
            "title": course.title,
            "department": course.department,
            "default_profile_id": getattr(default_profile_of(course), "pk", None),
            "students": course.students.count(),
            "role": "instructor" if role.teacher else "ta",
            "permissions": [name for name in TA_PERMISSIONS if getattr(role, name)],
        }
    ).data


class StudentSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    username = serializers.CharField()
    name = serializers.CharField(source="get_full_name")
    email = serializers.CharField()
    student_id = serializers.SerializerMethodField()

    def get_student_id(self, user: User) -> str:
        member = getattr(user, "member", None)
        return member.student_id if member else ""


class RosterUploadSerializer(serializers.Serializer):
    file = serializers.FileField(required=False, help_text="The class list as a CSV file.")
    csv = serializers.CharField(required=False, help_text="Or the CSV text itself.")
    sync = serializers.BooleanField(
        default=False, help_text="Also remove enrolled students absent from the file."
    )


RosterResultSerializer = inline_serializer(
    "RosterResult",
    {
        "added": serializers.IntegerField(),
        "created": serializers.IntegerField(),
        "removed": serializers.IntegerField(),
        "unchanged": serializers.IntegerField(),
    },
)


class TaSerializer(serializers.Serializer):
    username = serializers.CharField()
    permissions = serializers.ListField(
        child=ChoiceField(choices=list(TA_PERMISSIONS)), allow_empty=True
    )


class TaRemovalSerializer(serializers.Serializer):
    username = serializers.CharField()


StartAllSerializer = inline_serializer(
    "StartAllResult",
    {
        "started": serializers.IntegerField(),
        "already_open": serializers.IntegerField(),
        "skipped_at_limit": serializers.IntegerField(),
        "sessions": serializers.ListField(child=serializers.IntegerField()),
    },
)


class ClassSessionSerializer(SessionSerializer):
    """A session of the live class: the session as the API shows it, and whose it is."""

    username = serializers.CharField()
    name = serializers.CharField()

    def to_representation(self, instance):
        data = dict(session_payload(instance))
        data["username"] = instance.user.get_username()
        data["name"] = instance.user.get_full_name()
        return data


def _role(request: Request, code: str, need: str = "") -> CourseRole:
    role = role_by_code(request.user, code)
    if role is None:
        raise NotFound()
    if need and not getattr(role, need):
        raise PermissionDenied()
    return role


class CourseListView(APIView):
    @extend_schema(responses={200: CourseSerializer(many=True)})
    def get(self, request: Request) -> Response:
        roles = [course_role(request.user, c) for c in teaching_courses(request.user)]
        return Response([_course_data(role) for role in roles if role is not None])


class CourseDetailView(APIView):
    @extend_schema(responses={200: CourseSerializer})
    def get(self, request: Request, code: str) -> Response:
        return Response(_course_data(_role(request, code)))


class RosterView(PersonMixin, APIView):
    @extend_schema(responses={200: StudentSerializer(many=True)})
    def get(self, request: Request, code: str) -> Response:
        role = _role(request, code, "teacher")
        students = role.course.students.select_related("member").order_by("username")
        return Response(StudentSerializer(students, many=True).data)

    @extend_schema(
        request={
            "multipart/form-data": RosterUploadSerializer,
            "application/json": RosterUploadSerializer,
        },
        responses={200: RosterResultSerializer},
        description="Import (or, with sync, make the roster equal to) a CSV class list. "
        "A file with any error imports nothing: 400 with `rows` (row, column, message).",
    )
    def post(self, request: Request, code: str) -> Response:
        role = _role(request, code, "teacher")
        form = RosterUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        upload = form.validated_data.get("file")
        content = upload.read(MAX_BYTES + 1) if upload is not None else None  # more is refused
        if content is None and form.validated_data.get("csv"):
            content = form.validated_data["csv"].encode("utf-8")
        if content is None:
            message = _("Send the class list as a file (field “file”) or as text (field “csv”).")
            raise ServiceError(message, field="file")
        try:
            plan = check_roster(role.course, content, sync=form.validated_data["sync"])
        except RosterErrors as error:
            # The row errors travel beside the summary, as data (a ValidationError would turn
            # row numbers into strings), so a client can list them.
            rows = [e.as_dict() for e in error.errors]
            return Response({"file": [error.message], "rows": rows}, status=400)
        result = do_import_roster(self.person, role.course, plan)
        return Response(
            {
                "added": result.added,
                "created": result.created,
                "removed": result.removed,
                "unchanged": result.unchanged,
            }
        )


class TaView(PersonMixin, APIView):
    @extend_schema(responses={200: TaSerializer(many=True)})
    def get(self, request: Request, code: str) -> Response:
        role = _role(request, code, "teacher")
        grants = course_tas(role.course)
        data = [
            {"username": g.user.get_username(), "permissions": sorted(g.permissions)}
            for g in grants
        ]
        return Response(TaSerializer(data, many=True).data)

    @extend_schema(request=TaSerializer, responses={200: TaSerializer})
    def post(self, request: Request, code: str) -> Response:
        role = _role(request, code, "teacher")
        form = TaSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        grant = check_ta(
            role.course, form.validated_data["username"], form.validated_data["permissions"]
        )
        do_set_ta(self.person, role.course, grant)
        return Response(
            {"username": grant.user.get_username(), "permissions": sorted(grant.permissions)}
        )

    @extend_schema(request=TaRemovalSerializer, responses={204: None})
    def delete(self, request: Request, code: str) -> Response:
        role = _role(request, code, "teacher")
        form = TaRemovalSerializer(data=request.data or request.query_params)
        form.is_valid(raise_exception=True)
        username = form.validated_data["username"]
        grants = {g.user.get_username(): g for g in course_tas(role.course)}
        if username not in grants:
            raise NotFound()
        do_remove_ta(self.person, role.course, grants[username].user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class StartAllView(PersonMixin, APIView):
    @extend_schema(request=None, responses={200: StartAllSerializer})
    def post(self, request: Request, code: str) -> Response:
        role = _role(request, code, "manage_class_desktops")
        result = do_start_all(self.person, role.course)
        return Response(
            {
                "started": result.started,
                "already_open": result.already_open,
                "skipped_at_limit": result.skipped_at_limit,
                "sessions": result.session_ids,
            }
        )


StopAllSerializer = inline_serializer("StopAllResult", {"stopped": serializers.IntegerField()})


class StopAllView(PersonMixin, APIView):
    @extend_schema(
        request=None,
        responses={
            200: inline_serializer("StopAllResult", {"stopped": serializers.IntegerField()})
        },
    )
    def post(self, request: Request, code: str) -> Response:
        role = _role(request, code, "manage_class_desktops")
        return Response({"stopped": do_stop_all(self.person, role.course)})


class ClassView(APIView):
    @extend_schema(responses={200: ClassSessionSerializer(many=True)})
    def get(self, request: Request, code: str) -> Response:
        role = _role(request, code, "view_live_class")
        sessions = class_sessions(role.course)
        return Response(ClassSessionSerializer(sessions, many=True).data)
