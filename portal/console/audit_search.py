"""Searching the audit trail for the console (read only: events are append-only).

A search is who (the actor), what (the kind), when (from/to days in the viewer's time zone,
both inclusive), a session id, a node id and free text in the event's details. The text is
matched in the details' JSON as text (a cast), which works on PostgreSQL and SQLite alike.
The CSV export streams the search, newest first, cut at :data:`EXPORT_CAP` rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.translation import gettext as _

from scheduling.csv_export import SafeWriter
from scheduling.models import AuditEvent

PAGE_SIZE = 50
EXPORT_CAP = 100_000
CSV_COLUMNS = ("at", "kind", "actor", "session_id", "node_id", "address", "data")


@dataclass(frozen=True)
class AuditSearch:
    """What to look for; empty fields match everything."""

    actor: str = ""
    kind: str = ""
    since: date | None = None
    until: date | None = None
    session_id: int | None = None
    node_id: int | None = None
    text: str = ""


def _day_start(day: date) -> datetime:
    """Midnight of ``day`` in the active (the viewer's) time zone."""
    return timezone.make_aware(datetime.combine(day, time.min))


def search_events(search: AuditSearch) -> QuerySet[AuditEvent]:
    """The events matching ``search``, newest first."""
    events = AuditEvent.objects.all()
    if search.actor:
        events = events.filter(actor__icontains=search.actor.strip())
    if search.kind:
        events = events.filter(kind=search.kind)
    if search.since is not None:
        events = events.filter(at__gte=_day_start(search.since))
    if search.until is not None:
        events = events.filter(at__lt=_day_start(search.until + timedelta(days=1)))
    if search.session_id is not None:
        events = events.filter(session_id=search.session_id)
    if search.node_id is not None:
        events = events.filter(node_id=search.node_id)
    if search.text:
        events = events.annotate(data_text=Cast("data", output_field=TextField())).filter(
            data_text__icontains=search.text.strip()
        )
    return events.order_by("-at", "-pk")


class _Echo:
    """A file-like object whose write returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value


def export_rows(events: QuerySet[AuditEvent]) -> Iterator[str]:
    """CSV lines of ``events`` (a header first), at most ``EXPORT_CAP`` events; when there
    are more, a last line says the export was cut."""
    writer = SafeWriter(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for written, event in enumerate(events[: EXPORT_CAP + 1].iterator(chunk_size=2000)):
        if written == EXPORT_CAP:
            yield writer.writerow(
                [
                    "",
                    "",
                    _("Cut at %(cap)s rows: narrow the search to export the rest.")
                    % {"cap": EXPORT_CAP},
                ]
            )
            return
        yield writer.writerow(
            [
                timezone.localtime(event.at).isoformat(),
                event.kind,
                event.actor,
                event.session_id or "",
                event.node_id or "",
                event.address or "",
                json.dumps(event.data, cls=DjangoJSONEncoder, ensure_ascii=False, sort_keys=True),
            ]
        )
