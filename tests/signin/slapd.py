"""A real OpenLDAP server for the LDAP sign-in tests: Debian's slapd on 127.0.0.1.

:class:`Slapd` writes a slapd.conf (mdb database, the core, cosine, inetorgperson and nis
schemas) into a temporary folder, starts slapd on a free port in the foreground, and loads
:data:`DIRECTORY` with ldapadd. The ``slapd`` fixture (module scope) starts one per test
module and stops it after.

The directory (base ``dc=campus,dc=test``):

- ``cn=portal,ou=services``: the portal's service account (bind DN), password ``svc-pw``;
- people under ``ou=people``, password ``pw-<uid>``: ``lina`` (a student, Physics), ``felix``
  (faculty, Chemistry), ``greta`` (an admin, Computing), ``bruno`` (a student whose group the
  tests change), ``lola`` (also a local account in the tests), ``dora`` (a disabled account
  in the tests);
- groups (groupOfNames) under ``ou=groups``: ``students``, ``faculty``, ``deskpool-admins``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from tests.integration.stack import free_port, wait_for
from tests.signin.django_server import log_tail, stop_process

SLAPD = Path("/usr/sbin/slapd")
LDAPADD = Path("/usr/bin/ldapadd")
LDAPMODIFY = Path("/usr/bin/ldapmodify")
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")

BASE = "dc=campus,dc=test"
ROOT_DN = f"cn=admin,{BASE}"
ROOT_PW = "root-pw"
SERVICE_DN = f"cn=portal,ou=services,{BASE}"
SERVICE_PW = "svc-pw"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"

# (uid, given name, surname, department, groups)
PERSONS = [
    ("lina", "Lina", "Student", "Physics", ["students"]),
    ("felix", "Felix", "Faculty", "Chemistry", ["faculty"]),
    ("greta", "Greta", "Admin", "Computing", ["deskpool-admins"]),
    ("bruno", "Bruno", "Changing", "Biology", ["students"]),
    ("lola", "Lola", "Local", "History", ["students"]),
    ("dora", "Dora", "Disabled", "Physics", ["students"]),
]

SLAPD_CONF = """\
{includes}
pidfile {run}/slapd.pid
argsfile {run}/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb

database mdb
maxsize 16777216
suffix "{base}"
rootdn "{root_dn}"
rootpw {root_pw}
directory {run}/data

# The password only for binding; the service account reads the rest; nobody else anything.
access to attrs=userPassword
    by anonymous auth
    by * none
access to *
    by dn.exact="{service_dn}" read
    by self read
    by * none
"""


def password_of(uid: str) -> str:
    return f"pw-{uid}"


def person_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def group_dn(name: str) -> str:
    return f"cn={name},{GROUPS}"


def directory_ldif() -> str:
    """The test directory, as LDIF for ldapadd."""
    entries = [
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: campus\no: Campus",
        f"dn: ou=services,{BASE}\nobjectClass: organizationalUnit\nou: services",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: {SERVICE_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
        f"cn: portal\nuserPassword: {SERVICE_PW}",
    ]
    for uid, given, surname, department, _groups in PERSONS:
        entries.append(
            f"dn: {person_dn(uid)}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
            f"cn: {given} {surname}\ngivenName: {given}\nsn: {surname}\n"
            f"mail: {uid}@campus.test\ndepartmentNumber: {department}\n"
            f"userPassword: {password_of(uid)}"
        )
    for group in ("students", "faculty", "deskpool-admins"):
        members = [uid for uid, *_rest, groups in PERSONS if group in groups]
        lines = [f"dn: {group_dn(group)}", "objectClass: groupOfNames", f"cn: {group}"]
        lines += [f"member: {person_dn(uid)}" for uid in members]
        entries.append("\n".join(lines))
    return "\n\n".join(entries) + "\n"


class Slapd:
    """One slapd process serving the test directory on ``uri``; :meth:`stop` ends it."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.port = free_port()
        self.uri = f"ldap://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "slapd.conf"
        conf.write_text(
            SLAPD_CONF.format(
                includes="\n".join(f"include /etc/ldap/schema/{s}.schema" for s in SCHEMAS),
                run=self.workdir,
                base=BASE,
                root_dn=ROOT_DN,
                root_pw=ROOT_PW,
                service_dn=SERVICE_DN,
            )
        )
        log = open(self.workdir / "slapd.log", "ab")  # noqa: SIM115 - closed with the process
        # -d 0: stay in the foreground (a child of this test), logging nothing but errors.
        self.process = subprocess.Popen(
            [str(SLAPD), "-f", str(conf), "-h", f"{self.uri}/", "-d", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self._answers, 30.0, f"slapd on {self.uri}")
        self.modify(directory_ldif(), add=True)

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"slapd exited early:\n{self.log_tail()}")
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def modify(self, ldif: str, *, add: bool = False) -> None:
        """Apply LDIF as the directory's root (ldapadd with ``add``, else ldapmodify)."""
        tool = LDAPADD if add else LDAPMODIFY
        done = subprocess.run(
            [str(tool), "-x", "-H", self.uri, "-D", ROOT_DN, "-w", ROOT_PW],
            input=ldif,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, f"{tool.name} failed: {done.stderr}\n{self.log_tail()}"

    def set_groups(self, uid: str, *, remove: str, add: str) -> None:
        """Move a person from group ``remove`` to group ``add``."""
        member = person_dn(uid)
        self.modify(
            f"dn: {group_dn(remove)}\nchangetype: modify\ndelete: member\nmember: {member}\n\n"
            f"dn: {group_dn(add)}\nchangetype: modify\nadd: member\nmember: {member}\n"
        )

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.workdir / "slapd.log", lines)

    def stop(self) -> None:
        stop_process(self.process)


def ldap_env(uri: str) -> dict[str, str]:
    """The DESKPOOL_LDAP_* variables a campus admin would set for this directory."""
    return {
        "DESKPOOL_LDAP_SERVER_URI": uri,
        "DESKPOOL_LDAP_BIND_DN": SERVICE_DN,
        "DESKPOOL_LDAP_BIND_PASSWORD": SERVICE_PW,
        "DESKPOOL_LDAP_USER_SEARCH_BASE": PEOPLE,
        "DESKPOOL_LDAP_USER_FILTER": "(&(objectClass=inetOrgPerson)(uid=%(user)s))",
        "DESKPOOL_LDAP_GROUP_SEARCH_BASE": GROUPS,
        "DESKPOOL_LDAP_DEPARTMENT_ATTR": "departmentNumber",
        "DESKPOOL_LDAP_TIMEOUT_S": "5",
        "DESKPOOL_SIGNIN_ADMIN_GROUPS": "deskpool-admins",
        "DESKPOOL_SIGNIN_FACULTY_GROUPS": "faculty, Lecturers",
    }


@pytest.fixture(scope="module")
def slapd(tmp_path_factory) -> Iterator[Slapd]:
    """A running slapd with the test directory, for one test module."""
    for tool in (SLAPD, LDAPADD, LDAPMODIFY):
        if not tool.exists():
            pytest.skip(f"the LDAP tests need Debian's slapd and ldap-utils: {tool} is missing")
    server = Slapd(tmp_path_factory.mktemp("slapd"))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        with suppress(OSError):
            shutil.rmtree(server.workdir / "data")
