"""``python -m bench.start``: time from submit to RUNNING for one desktop, N times.

Runs against a live portal (``make demo`` in another terminal). Each run logs in through
the API, submits one session, polls until it is RUNNING, then stops it and waits for ENDED.
Prints every run and the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import httpx


def wait_state(client: httpx.Client, session_id: int, wanted: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/api/v1/sessions/{session_id}/").json()
        if body["state"] == wanted:
            return body
        if body["state"] in ("FAILED", "LOST", "CANCELLED"):
            raise SystemExit(f"session {session_id} ended {body['state']}: {body['reason']}")
        time.sleep(0.02)
    raise SystemExit(f"session {session_id} did not reach {wanted} within {timeout} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=f"http://127.0.0.1:{os.environ.get('PORT', '8000')}")
    parser.add_argument("--user", default="student1")
    parser.add_argument("--password", default=os.environ.get("DEMO_PASSWORD") or "deskpool")
    parser.add_argument("--profile", default="ai-painting", help="profile slug")
    parser.add_argument("--purpose", default="thesis")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    client = httpx.Client(base_url=args.url, timeout=10)
    login = client.post(
        "/api/v1/auth/token/", json={"username": args.user, "password": args.password}
    )
    if login.status_code != 200:
        raise SystemExit(f"login as {args.user} failed: {login.text}")
    client.headers["Authorization"] = f"Token {login.json()['token']}"
    profiles = {p["slug"]: p["id"] for p in client.get("/api/v1/profiles/").json()}
    if args.profile not in profiles:
        raise SystemExit(f"no profile {args.profile!r}; there are {sorted(profiles)}")

    times = []
    for run in range(1, args.runs + 1):
        started = time.monotonic()
        created = client.post(
            "/api/v1/sessions/", json={"profile": profiles[args.profile], "purpose": args.purpose}
        )
        if created.status_code != 201:
            raise SystemExit(f"submit failed: {created.text}")
        session_id = created.json()["id"]
        body = wait_state(client, session_id, "RUNNING", 120)
        elapsed = time.monotonic() - started
        times.append(elapsed)
        print(f"run {run:2d}: session {session_id} RUNNING after {elapsed:.2f} s on {body['node']}")
        client.post(f"/api/v1/sessions/{session_id}/stop/")
        wait_state(client, session_id, "ENDED", 60)
    print(
        f"submit -> RUNNING over {len(times)} runs: median {statistics.median(times):.2f} s, "
        f"min {min(times):.2f} s, max {max(times):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
