"""Password hashing that a sign-in storm cannot turn against the people already signed in
(docs/security.md, "Sign-in storms").

A password sign-in costs one PBKDF2-SHA256 hash: Django's 1,000,000 iterations, about a
quarter of a CPU second on these machines, by design. 200 students signing in within a
second on 2 CPUs (``python -m bench.storm --outside``) ask for 50 CPU seconds of it, and
as Django hashes, that did two kinds of harm to the students already signed in:

- each request hashes on a thread of its own, so a hundred hashes ran at once in each
  portal process and the CPU was shared among them all: a desktop request got a
  hundredth of it;
- the request holds one of its process's pooled database connections (ten by default)
  from the user's lookup to its end, so ten sign-ins hashing held them all and the other
  requests waited for one.

A desktop request then waited 14 s (p50) to be stored. This hasher is Django's, under the
same algorithm name and in the same encoding, so stored hashes verify as before and nothing
is rehashed. It gives the thread's database connection back to the pool first (outside a
transaction; the next query takes one again), then hashes in a pool of one thread per CPU
per process: sign-ins wait their turn for it, holding neither a connection nor a CPU, and
every other request keeps its share. Figures in docs/measurements.md. The sign-ins
themselves take as long as the CPUs need for all the hashes; nicing the hashing threads
as well changed nothing measurable, so they are not niced.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection

_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def hashing_pool() -> ThreadPoolExecutor:
    """This process's hashing threads, one per CPU (made again in a forked child)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            workers = os.cpu_count() or 1
            _pool = (os.getpid(), ThreadPoolExecutor(workers, thread_name_prefix="hash"))
        return _pool[1]


class PooledPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2-SHA256 (algorithm ``pbkdf2_sha256``), hashed in :func:`hashing_pool`
    without holding the thread's database connection. ``verify`` and ``harden_runtime``
    call ``encode``, so every hash of a sign-in goes this way."""

    def encode(self, password: str, salt: str, iterations: Any = None) -> str:
        if not connection.in_atomic_block:
            connection.close()  # pooled: back to the pool; unpooled: reopened on demand
        parent = super().encode
        return hashing_pool().submit(parent, password, salt, iterations).result()
