"""Every row lock (``select_for_update``) of the resource side, in one place.

Locks are taken in primary-key order wherever several rows are locked together, so two
writers never wait on each other in opposite orders. Call these inside a transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.contrib.auth.models import User
from django.db import connection, transaction

from .models import CourseFolder, JoinToken, Node, PoolPolicy, Session, WarmDesktop


def lock_course_folder(course_id: int) -> CourseFolder:
    """A course's folder row (created first if there is none): its uploads and deletions,
    and its cap, queue here (docs/course-files.md)."""
    CourseFolder.objects.get_or_create(course_id=course_id)
    return CourseFolder.objects.select_for_update().get(course_id=course_id)


def lock_node(node_id: int) -> Node | None:
    return Node.objects.select_for_update().filter(pk=node_id).first()


def lock_sessions(ids: Iterable[int]) -> dict[int, tuple[str, int | None]]:
    """Several sessions (a cycle's placements, an agent's batch), in id order: each one's
    state and node as they are now."""
    rows = Session.objects.select_for_update().filter(pk__in=list(ids)).order_by("pk")
    return {pk: (state, node) for pk, state, node in rows.values_list("pk", "state", "node_id")}


def lock_policy() -> PoolPolicy:
    """The pool policy row (created first if there is none)."""
    return PoolPolicy.objects.select_for_update().get(pk=PoolPolicy.current().pk)


def lock_warm(**lookup: object) -> WarmDesktop | None:
    """One warm desktop matched by ``lookup``, locked without locking joined rows."""
    return (
        WarmDesktop.objects.select_for_update(of=("self",))
        .select_related("booking")
        .filter(**lookup)  # type: ignore[arg-type]
        .order_by("pk")
        .first()
    )


def lock_unused_join_token(token_hash: str) -> JoinToken | None:
    return JoinToken.objects.select_for_update().filter(token_hash=token_hash, used_at=None).first()


def lock_person(user_id: int) -> User | None:
    """A person's row: their submissions queue here while their open sessions are counted."""
    return User.objects.select_for_update().filter(pk=user_id).first()


def lock_account(username: str) -> User | None:
    """An account by name, while a campus sign-in creates or updates it (portal.signin)."""
    return User.objects.select_for_update().filter(username=username).first()


@contextmanager
def one_snapshot() -> Iterator[None]:
    """Reads inside see one snapshot of the database, not one per query: a transaction at
    REPEATABLE READ on PostgreSQL (SQLite's read transactions already are one snapshot).
    Inside an outer transaction (a test's) the outer one decides."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield
