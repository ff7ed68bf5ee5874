"""``manage.py rotate_gateway_key <hostname>|--all``: sign a node's gateway tickets with a new
key (docs/agent-protocol.md "Desktop gateway"). The key before keeps opening tickets signed
a moment ago; the one before that is dropped."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from scheduling.models import Node
from scheduling.services.gateway_keys import do_rotate_gateway_key


class Command(BaseCommand):
    help = "Rotate the gateway ticket key of a node (by hostname), or of every node (--all)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("hostname", nargs="?", default="", help="The node's hostname.")
        parser.add_argument("--all", action="store_true", help="Every registered node.")

    def handle(self, *args, hostname: str, **options) -> None:
        if bool(hostname) == bool(options["all"]):
            raise CommandError("Name one node's hostname, or --all.")
        nodes = Node.objects.order_by("pk")
        if hostname:
            nodes = nodes.filter(hostname=hostname)
            if not nodes.exists():
                raise CommandError(f"No node is registered as {hostname!r}.")
        for node in nodes:
            key_id = do_rotate_gateway_key(node, actor="cli")
            self.stdout.write(f"{node.hostname}: gateway key {key_id}")
