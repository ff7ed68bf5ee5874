from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from people.models import Course
from portal.kit.person import actor_of
from scheduling.services.account_audit import setting_passwords_as
from scheduling.services.api_tokens import end_every_session


@admin.register(Course)
class CourseAdmin(admin.ModelAdmin):
    list_display = ["code", "title"]
    filter_horizontal = ["instructors", "students"]


class PersonAdmin(UserAdmin):
    """Django's user admin, with an action that signs a person out everywhere; a password set
    through its form is audited as set by the admin (scheduling.services.account_audit)."""

    actions = ["end_every_session"]

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        with setting_passwords_as(actor_of(request)):
            return super().user_change_password(request, id, form_url)

    @admin.action(description=_("End every session (sign out of all browsers, revoke API tokens)"))
    def end_every_session(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        actor = actor_of(request)
        for person in queryset:
            ended = end_every_session(person, actor)
            self.message_user(
                request,
                ngettext(
                    "%(name)s: %(sessions)d login session ended, %(tokens)d API tokens revoked.",
                    "%(name)s: %(sessions)d login sessions ended, %(tokens)d API tokens revoked.",
                    ended.sessions,
                )
                % {
                    "name": person.get_username(),
                    "sessions": ended.sessions,
                    "tokens": ended.tokens,
                },
                messages.SUCCESS,
            )


admin.site.unregister(User)
admin.site.register(User, PersonAdmin)
