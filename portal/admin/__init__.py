"""The Django admin (``/admin/``), a face like the others: Django imports this package to
register the models; each registration changes data through the services, as the pages do
(docs/architecture.md, "Admin changes")."""

from portal.admin import people, scheduling

__all__ = ["people", "scheduling"]
