"""Sign-in storms (docs/security.md): the password hasher is Django's PBKDF2-SHA256, hashed
one per CPU in each process and holding no database connection meanwhile."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import hashers
from django.contrib.auth.hashers import PBKDF2PasswordHasher, check_password, make_password
from django.contrib.auth.models import User
from django.db import connection

from portal.server.hashers import PooledPBKDF2PasswordHasher


def test_the_hashes_are_djangos_so_stored_passwords_verify_and_none_is_rehashed():
    ours, stock = PooledPBKDF2PasswordHasher(), PBKDF2PasswordHasher()
    assert ours.encode("deskpool", "saltsaltsalt") == stock.encode("deskpool", "saltsaltsalt")
    stored = stock.encode("s3cret pass", stock.salt())
    assert check_password("s3cret pass", stored)
    assert not check_password("s3cret pasS", stored)
    assert not hashers.identify_hasher(stored).must_update(stored)
    assert make_password("x").startswith("pbkdf2_sha256$")


def test_at_most_one_hash_per_cpu_runs_at_once_and_none_on_the_requests_thread(monkeypatch):
    running, most, threads = 0, 0, set()
    lock = threading.Lock()
    real = hashers.pbkdf2

    def counted(*args, **kwargs):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            threads.add(threading.current_thread().name)
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(hashers, "pbkdf2", counted)
    hasher = PooledPBKDF2PasswordHasher()
    signins = 4 * (os.cpu_count() or 1)
    with ThreadPoolExecutor(signins, thread_name_prefix="request") as requests:
        done = list(
            requests.map(lambda n: hasher.encode(f"pw{n}", "saltsaltsalt", 20000), range(signins))
        )
    assert len(set(done)) == signins
    assert most <= (os.cpu_count() or 1)
    assert threads and all(name.startswith("hash") for name in threads), threads


@pytest.mark.django_db(transaction=True)
def test_a_sign_in_gives_its_database_connection_back_before_it_hashes():
    user = User.objects.create_user("ada", password="a long enough password")
    User.objects.get(pk=user.pk)  # the request's lookup opens the connection
    assert connection.connection is not None
    assert user.check_password("a long enough password")
    assert connection.connection is None  # given back to the pool for the hash
    assert User.objects.filter(pk=user.pk).exists()  # and the next query takes one again
