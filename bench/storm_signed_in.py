"""The parts of ``python -m bench.storm --signed-in`` that are not the client
(``bench.signed_in``): the students' accounts, made with the stack's own code, and the stack of
an older commit (``--at``), in a git worktree."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "storm-si"
PASSWORD = "storm-signed-in-password"

# Run by the stack's own ``manage.py shell``, so that it works at older commits too (Course
# lived in portal.models before people/ existed; the venv's editable install of this tree
# would still import people/, so the tree is looked at). One hash for every account: the accounts
# are not what is measured. Sessions a run against a long-lived stack left open are stopped.
ACCOUNTS = """
import os
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
if os.path.isdir("people"):
    from people.models import Course
else:
    from portal.models import Course
people = get_user_model()
course, _ = Course.objects.get_or_create(
    code={prefix!r}, defaults={{"title": "Signed-in class start", "department": "cs"}}
)
encoded = make_password({password!r})
users = []
for n in range(1, {count} + 1):
    user, _ = people.objects.get_or_create(username=f"{prefix}-s{{n:03d}}")
    user.password, user.is_active = encoded, True
    users.append(user)
people.objects.bulk_update(users, ["password", "is_active"])
course.students.add(*users)
from scheduling.choices import TERMINAL_STATES
from scheduling.models import Session
from scheduling.services.sessions import do_stop
for session in Session.objects.filter(user__in=users).exclude(state__in=TERMINAL_STATES):
    do_stop(session.user, session)
"""


def add_accounts(tree: Path, env: dict[str, str], count: int) -> None:
    """``count`` students enrolled in the course ``storm-si``, all with :data:`PASSWORD`."""
    script = ACCOUNTS.format(prefix=PREFIX, password=PASSWORD, count=count)
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script], cwd=tree, env=env, check=True
    )


def signed_in_argv(args: argparse.Namespace, url: str, dsn: str = "") -> list[str]:
    argv = [sys.executable, "-m", "bench.signed_in", url, "--prefix", PREFIX]
    argv += ["--count", str(args.students), "--password", PASSWORD, "--mode", args.signed_in]
    argv += ["--spread", str(args.spread), "--poll", str(args.poll)]
    argv += ["--timeout", str(args.timeout), "--course", PREFIX]
    argv += ["--flame", args.flame] if args.flame else []
    argv += ["--page-polls"] if args.page_polls else []
    return argv + (["--dsn", dsn] if dsn else [])


def commit_of(commit: str | None) -> str:
    """``commit`` (or this tree's HEAD) as a short hash, with "+ changes" for a dirty tree."""
    git = ["git", "-C", str(ROOT)]
    named = subprocess.run(
        [*git, "rev-parse", "--short", commit or "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if commit:
        return named
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return f"{named} (this tree{' + uncommitted changes' if dirty else ''})"


@contextmanager
def worktree(commit: str | None, workdir: Path) -> Iterator[Path]:
    """This tree, or ``commit``'s checked out in a worktree under ``workdir`` until the end."""
    if not commit:
        yield ROOT
        return
    tree = workdir / "tree"
    git = ["git", "-C", str(ROOT)]
    subprocess.run([*git, "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
    try:
        yield tree
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)
