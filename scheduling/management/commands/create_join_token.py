from django.core.management.base import BaseCommand

from scheduling.services.nodes import do_create_join_token


class Command(BaseCommand):
    help = "Create a one-time join token with which a node agent registers its node."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--hostname", default="", help="Only this hostname may use it.")

    def handle(self, *args, hostname: str, **options) -> None:
        self.stdout.write(do_create_join_token(hostname, actor="cli"))
