"""``manage.py create_join_token``: a one-time token with which a node agent registers."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from scheduling.models import Node
from scheduling.services import ServiceError
from scheduling.services.nodes import check_join_token, do_create_join_token


class Command(BaseCommand):
    help = (
        "Create a one-time join token with which a node agent registers its node: bound to "
        "a hostname (or --any-host), expiring after --hours (24)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--hostname", default="", help="Only this hostname may use it.")
        parser.add_argument("--any-host", action="store_true", help="Any hostname may use it.")
        parser.add_argument("--hours", type=float, default=24.0, help="Lifetime (1 to 720).")
        parser.add_argument(
            "--may-replace",
            action="store_true",
            help="It may replace the registered node of that hostname (a rebuilt machine).",
        )
        parser.add_argument(
            "--replace-if-registered",
            action="store_true",
            help="--may-replace when that hostname is registered, else a plain token.",
        )

    def handle(self, *args, hostname: str, any_host: bool, hours: float, **options) -> None:
        may_replace = options["may_replace"] or (
            options["replace_if_registered"] and Node.objects.filter(hostname=hostname).exists()
        )
        try:
            bound = check_join_token(
                hostname, any_host=any_host, hours=hours, may_replace=may_replace
            )
        except ServiceError as error:
            raise CommandError(error.message) from None
        plain = do_create_join_token(
            bound,
            actor="cli",
            expires_at=timezone.now() + timedelta(hours=hours),
            may_replace=may_replace,
        )
        self.stdout.write(plain)
