"""A course's roster: imported from an instructor's spreadsheet (CSV), or edited by hand.

``check_roster`` reads the whole file and either returns a :class:`RosterPlan` (what will be
added, created and, for a sync, removed) or raises :class:`RosterErrors` listing every bad
row; ``do_import_roster`` applies a plan in one transaction, so a file with any error imports
nothing. People not known yet get an account ready for campus sign-in (no usable password).
"""

from __future__ import annotations

import codecs
import csv
import io
from dataclasses import dataclass, field

from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils.translation import gettext as _

from people.models import Course, Member, Role
from scheduling.choices import AuditKind
from scheduling.models import AuditEvent
from scheduling.services import ServiceError

MAX_ROWS = 5000
MAX_BYTES = 2 * 1024 * 1024

# Header names we recognise (lower case, spaces and "-"/"_" removed), per column.
_HEADERS = {
    "username": {"username", "user", "login", "account", "用户名", "账号"},
    "student_id": {"studentid", "studentnumber", "matriculation", "id", "学号"},
    "identity": {"usernameorstudentid", "usernameorid", "student", "学生"},
    "name": {"name", "fullname", "studentname", "姓名", "名字"},
    "first_name": {"firstname", "givenname", "forename", "名"},
    "last_name": {"lastname", "surname", "familyname", "姓"},
    "email": {"email", "mail", "emailaddress", "邮箱", "电子邮件", "电子邮箱"},
}
# Without a recognised header, the columns are read in the documented order.
_POSITIONAL = ("identity", "name", "email")


@dataclass(frozen=True)
class RowError:
    """One problem in the file: the spreadsheet's row number (the header is row 1)."""

    row: int
    column: str
    message: str

    def as_dict(self) -> dict[str, object]:
        return {"row": self.row, "column": self.column, "message": self.message}


class RosterErrors(ServiceError):
    """The file has errors; nothing was imported. ``errors`` says where and what to do."""

    def __init__(self, errors: list[RowError]):
        super().__init__(
            _("The file has %(count)s error(s); nothing was imported. Fix them and try again.")
            % {"count": len(errors)},
            field="file",
        )
        self.errors = errors


@dataclass
class RosterRow:
    row: int
    username: str
    student_id: str
    name: str
    email: str
    user: User | None = None  # the existing account this row matched
    first_name: str = ""  # from separate first/last name columns, when the file has them
    last_name: str = ""


@dataclass
class RosterPlan:
    """What an import will change. ``to_add``: rows not enrolled yet (``user`` None: a new
    account); ``to_remove``: enrolled people absent from the file (a sync only)."""

    course: Course
    rows: list[RosterRow]
    sync: bool
    to_add: list[RosterRow] = field(default_factory=list)
    to_remove: list[User] = field(default_factory=list)
    unchanged: int = 0
    by_hand: bool = False

    @property
    def to_create(self) -> list[RosterRow]:
        return [r for r in self.to_add if r.user is None]


@dataclass(frozen=True)
class RosterResult:
    added: int
    created: int
    removed: int
    unchanged: int


def _key(header: str) -> str:
    return "".join(ch for ch in header.strip().lower() if ch not in " -_.")


def _decode(file_bytes: bytes) -> str:
    if len(file_bytes) > MAX_BYTES:
        raise RosterErrors(
            [
                RowError(
                    0,
                    "file",
                    _(
                        "The file is larger than 2 MB, far more than a class list. Is it the "
                        "right file? Save only the class list as CSV and upload that."
                    ),
                )
            ]
        )
    try:
        if file_bytes.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            return file_bytes.decode("utf-16")  # Excel's "Unicode text"
        return file_bytes.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise RosterErrors(
            [
                RowError(
                    0,
                    "file",
                    _(
                        "The file is not UTF-8 text. In your spreadsheet, save it as "
                        "“CSV UTF-8 (comma delimited)” and upload that."
                    ),
                )
            ]
        ) from error


def _read_rows(text: str) -> list[list[str]]:
    """The file's rows, the header first: at most ``MAX_ROWS`` + 1 of students (more is
    refused without reading on). A row the csv module cannot read (a cell over its field
    limit, most often a quote left open that runs on through the file) is a RowError, not
    a 500."""
    first = text.split("\n", 1)[0]
    delimiter = ";" if first.count(";") > first.count(",") else ","
    if "\t" in first and not first.count(delimiter):
        delimiter = "\t"
    # newline="": the csv module's own line handling, so a file of lone \r line ends (old
    # Mac spreadsheets) reads as rows instead of raising.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[list[str]] = []
    try:
        for cells in reader:
            rows.append(cells)
            if len(rows) > MAX_ROWS + 1:
                break
    except csv.Error as error:
        row = len(rows) + 1  # the header is row 1
        limit = csv.field_size_limit()
        if "field limit" in str(error):
            message = _(
                "Row %(row)s (line %(line)s of the file) has a cell longer than %(limit)s "
                'characters (%(kb)s KB), the most a cell may hold. Most often a quote (") '
                "opens a cell and is never closed, so the cell runs on through the file: "
                "close or delete that quote, or shorten the cell, and upload the file again."
            ) % {"row": row, "line": reader.line_num, "limit": limit, "kb": limit // 1024}
        else:
            message = _(
                "Row %(row)s (line %(line)s of the file) cannot be read as CSV. Check its "
                "quotes and separators, or save the class list again as “CSV UTF-8”."
            ) % {"row": row, "line": reader.line_num}
        raise RosterErrors([RowError(row, "file", message)]) from error
    return rows


def _columns(header: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for index, cell in enumerate(header):
        key = _key(cell)
        for column, names in _HEADERS.items():
            if key in names and column not in found:
                found[column] = index
    if not found:
        return {name: index for index, name in enumerate(_POSITIONAL)}
    return found


_USERNAME = UnicodeUsernameValidator()


def _parse(text: str) -> tuple[list[RosterRow], list[RowError]]:
    rows = _read_rows(text)
    errors: list[RowError] = []
    if not rows:
        return [], [RowError(0, "file", _("The file is empty. Upload the class list as CSV."))]
    columns = _columns(rows[0])
    if not {"username", "student_id", "identity"} & columns.keys():
        return [], [
            RowError(
                1,
                "username",
                _("The header row names no “username” or “student id” column. Add one."),
            )
        ]
    if len(rows) - 1 > MAX_ROWS:
        return [], [
            RowError(
                0,
                "file",
                _(
                    "The file has more than %(max)s students, the most one import takes. "
                    "Import the class list in parts of at most %(max)s rows (without Sync)."
                )
                % {"max": MAX_ROWS},
            )
        ]
    parsed: list[RosterRow] = []
    for number, cells in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in cells):
            continue

        def cell(column: str, cells: list[str] = cells) -> str:
            index = columns.get(column)
            return cells[index].strip() if index is not None and index < len(cells) else ""

        identity = cell("identity")
        parsed.append(
            RosterRow(
                row=number,
                username=cell("username") or identity or cell("student_id"),
                student_id=cell("student_id") or ("" if "username" in columns else identity),
                name=cell("name") or f"{cell('first_name')} {cell('last_name')}".strip(),
                first_name=cell("first_name"),
                last_name=cell("last_name"),
                email=cell("email"),
            )
        )
    if not parsed:
        errors.append(RowError(0, "file", _("The file has a header row but no students.")))
    return parsed, errors


def _check_row(row: RosterRow, errors: list[RowError]) -> None:
    """Match the row to an existing account or check it can make a new one."""
    if not row.username and not row.student_id:
        errors.append(
            RowError(
                row.row,
                "username",
                _("No username or student id. Fill it in, or delete the row."),
            )
        )
        return
    by_username = User.objects.filter(username=row.username).first() if row.username else None
    by_id = (
        User.objects.filter(member__student_id=row.student_id).first() if row.student_id else None
    )
    if by_username and by_id and by_username.pk != by_id.pk:
        errors.append(
            RowError(
                row.row,
                "student_id",
                _(
                    "Student id %(id)s belongs to %(other)s, not to %(name)s. "
                    "Correct the username or the id."
                )
                % {"id": row.student_id, "other": by_id.get_username(), "name": row.username},
            )
        )
        return
    row.user = by_username or by_id
    if row.email:
        try:
            validate_email(row.email)
        except ValidationError:
            errors.append(
                RowError(
                    row.row,
                    "email",
                    _("“%(email)s” is not an e-mail address. Correct it, or leave it empty.")
                    % {"email": row.email},
                )
            )
    if len(row.name) > 150:
        errors.append(
            RowError(row.row, "name", _("The name is longer than 150 characters. Shorten it."))
        )
    if row.user is not None:
        return
    try:
        _USERNAME(row.username)
        if len(row.username) > 150:
            raise ValidationError("too long")
    except ValidationError:
        errors.append(
            RowError(
                row.row,
                "username",
                _(
                    "“%(name)s” cannot be a username: use at most 150 letters, digits "
                    "and @ . + - _ only."
                )
                % {"name": row.username},
            )
        )
    if len(row.student_id) > 40:
        errors.append(
            RowError(row.row, "student_id", _("The student id is longer than 40 characters."))
        )


def _check_duplicates(rows: list[RosterRow], errors: list[RowError]) -> None:
    seen: dict[str, int] = {}
    for row in rows:
        key = f"user:{row.user.pk}" if row.user else f"name:{row.username.lower()}"
        if key in seen:
            errors.append(
                RowError(
                    row.row,
                    "username",
                    _("%(name)s is already on row %(first)s. Delete one of the two rows.")
                    % {"name": row.username or row.student_id, "first": seen[key]},
                )
            )
        else:
            seen[key] = row.row


def _plan(course: Course, rows: list[RosterRow], *, sync: bool, by_hand: bool) -> RosterPlan:
    enrolled = {u.pk: u for u in course.students.all()}
    plan = RosterPlan(course=course, rows=rows, sync=sync, by_hand=by_hand)
    listed: set[int] = set()
    for row in rows:
        if row.user is not None and row.user.pk in enrolled:
            plan.unchanged += 1
            listed.add(row.user.pk)
        else:
            plan.to_add.append(row)
    if sync:
        plan.to_remove = sorted(
            (u for pk, u in enrolled.items() if pk not in listed), key=lambda u: u.get_username()
        )
    return plan


def check_roster(course: Course, file_bytes: bytes, *, sync: bool = False) -> RosterPlan:
    """Read a roster CSV (UTF-8 with or without BOM; comma or semicolon; a header row) and
    plan the change; raise RosterErrors listing every bad row."""
    rows, errors = _parse(_decode(file_bytes))
    if errors:
        raise RosterErrors(errors)
    for row in rows:
        _check_row(row, errors)
    _check_duplicates(rows, errors)
    if errors:
        raise RosterErrors(sorted(errors, key=lambda e: (e.row, e.column)))
    return _plan(course, rows, sync=sync, by_hand=False)


def check_add_student(course: Course, identity: str, name: str = "", email: str = "") -> RosterPlan:
    """One person added by hand (username or student id, with a name and e-mail for a new
    account); a ServiceError naming the field when the entry is not usable."""
    row = RosterRow(row=1, username=identity.strip(), student_id="", name=name, email=email)
    known = User.objects.filter(username=row.username).exists()
    if row.username and not known and Member.objects.filter(student_id=row.username).exists():
        row.student_id = row.username
    errors: list[RowError] = []
    _check_row(row, errors)
    if errors:
        first = errors[0]
        raise ServiceError(
            first.message,
            field="identity" if first.column in {"username", "student_id"} else first.column,
        )
    plan = _plan(course, [row], sync=False, by_hand=True)
    if plan.unchanged:
        raise ServiceError(
            _("%(name)s is already enrolled.") % {"name": identity}, field="identity"
        )
    return plan


def _create_account(row: RosterRow) -> User:
    """A student's account for campus sign-in: no usable password, name and e-mail filled."""
    if row.first_name or row.last_name:
        first, last = row.first_name, row.last_name
    else:  # one name column: kept whole (many names do not split into given and family)
        first, last = row.name, ""
    user = User(username=row.username, first_name=first[:150], last_name=last[:150])
    user.email = row.email
    user.set_unusable_password()
    user.save()
    Member.objects.create(user=user, role=Role.STUDENT, student_id=row.student_id)
    return user


def do_import_roster(actor: User, course: Course, plan: RosterPlan) -> RosterResult:
    """Apply the plan in one transaction (accounts, enrolments, removals), audited."""
    created = 0
    with transaction.atomic():
        added: list[User] = []
        for row in plan.to_add:
            # Someone may have signed in (or been imported) since the check.
            user = row.user or User.objects.filter(username=row.username).first()
            if user is None:
                user = _create_account(row)
                created += 1
            added.append(user)
        course.students.add(*added)
        if plan.to_remove:
            course.students.remove(*plan.to_remove)
        result = RosterResult(
            added=len(added), created=created, removed=len(plan.to_remove), unchanged=plan.unchanged
        )
        if plan.by_hand:
            kind = AuditKind.ROSTER_CHANGED
            data: dict[str, object] = {
                "course": course.code,
                "added": [u.get_username() for u in added],
                "created": created,
            }
        else:
            kind = AuditKind.ROSTER_IMPORTED
            data = {
                "course": course.code,
                "sync": plan.sync,
                "rows": len(plan.rows),
                "added": result.added,
                "created": result.created,
                "removed": result.removed,
                "unchanged": result.unchanged,
            }
        AuditEvent.objects.create(kind=kind, actor=f"user:{actor.get_username()}", data=data)
    return result


def do_remove_student(actor: User, course: Course, student: User) -> None:
    """Take one person off the roster, audited."""
    if not course.students.filter(pk=student.pk).exists():
        raise ServiceError(
            _("%(name)s is not enrolled.") % {"name": student.get_username()}, field="student"
        )
    with transaction.atomic():
        course.students.remove(student)
        AuditEvent.objects.create(
            kind=AuditKind.ROSTER_CHANGED,
            actor=f"user:{actor.get_username()}",
            data={"course": course.code, "removed": [student.get_username()]},
        )
