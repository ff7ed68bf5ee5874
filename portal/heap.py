"""The garbage collector in the long-lived server processes: ASGI servers, Celery workers.

Once such a process has imported its code and built its URL patterns, those objects live as
long as it does: about 150,000 of them in an ASGI process. CPython's full collections walk
every one, each time about 100 ms of CPU with the GIL held, and under a class-start storm an
ASGI process ran several of them in five seconds (docs/measurements.md, "GC"). Freezing what
start-up made moves it to the permanent generation, which collections skip; what is made
later (requests, the pages' sockets, sessions read) is collected as before.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect once, then leave everything alive now out of every later collection."""
    gc.collect()
    gc.freeze()
