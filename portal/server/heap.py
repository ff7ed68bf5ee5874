"""The garbage collector in the long-lived server processes: ASGI servers, Celery workers.

Once such a process has imported its code and built its URL patterns, those objects live as
long as it does: about 150,000 of them in an ASGI process. CPython's full collections walk
every one, each time about 100 ms of CPU with the GIL held (every request of the process
waits), and in a class-start storm an ASGI process ran several of them within five seconds
(docs/measurements.md, "Garbage collection"). So:

- what start-up made is frozen: moved to the permanent generation, which collections skip;
  what is made later (requests, the pages' sockets, sessions read) is collected as before;
- the youngest generation is collected every 10,000 net allocations instead of CPython's
  700: a request makes thousands of short-lived objects, and each young collection that
  runs promotes survivors towards the full collections. Cycles of garbage are freed a
  little later.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # CPython's default: 700; the older generations keep theirs (10, 10)


def settle_for_serving() -> None:
    """Collect once, leave everything alive now out of every later collection, and collect
    the young generation less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
