"""The live path's close codes and socket paths: the one definition, for Python and JavaScript.

The gateway (:mod:`nodeagent.gateway.server`) and the portal's consumers close with these
codes; the portal hands :func:`live_wire` to every page that opens a socket (as JSON in the
page), so the browser's code reads the same numbers and paths rather than copies of them.
"""

from __future__ import annotations

# Closes that end a socket for good: the page says why and does not retry.
CLOSE_SIGNED_OUT = 4401  # the login session ended (logout, disabled account, password change)
CLOSE_FORBIDDEN = 4403  # the person may not (or may no longer) open this
CLOSE_NO_SOUND = 4404  # the desktop may be opened, but its image serves no sound
CLOSE_SESSION_ENDED = 4410  # the desktop was stopped, preempted or suspended
CLOSE_TOO_BIG = 4413  # a message over the limit
CLOSE_TICKET_INVALID = 4400  # not a ticket, or a forged one
# The portal's live updates: a request the socket cannot serve (?fragment= names no form).
CLOSE_BAD_REQUEST = CLOSE_TICKET_INVALID
CLOSE_TICKET_EXPIRED = 4408  # a ticket past its time: ask the portal for a new one
CLOSE_TICKET_REPLAYED = 4409  # a ticket used before
CLOSE_TICKET_FOREIGN = 4421  # a ticket for another node, key or purpose
CLOSE_BUSY = 4429  # the gateway carries as many connections of this desktop as it may
# Closes after which a new ticket may succeed: the page retries (bounded).
CLOSE_UNREACHABLE = 4502  # the desktop does not answer, or its address is not one to use

CLOSE_CODES: dict[str, int] = {
    "signed_out": CLOSE_SIGNED_OUT,
    "forbidden": CLOSE_FORBIDDEN,
    "sound_none": CLOSE_NO_SOUND,
    "session_ended": CLOSE_SESSION_ENDED,
    "too_large": CLOSE_TOO_BIG,
    "ticket_invalid": CLOSE_TICKET_INVALID,
    "ticket_expired": CLOSE_TICKET_EXPIRED,
    "ticket_replayed": CLOSE_TICKET_REPLAYED,
    "ticket_foreign": CLOSE_TICKET_FOREIGN,
    "busy": CLOSE_BUSY,
    "unreachable": CLOSE_UNREACHABLE,
}
# The page stops retrying on these (the rest, and an unclean close, are retried).
FINAL_CLOSES = (
    "signed_out",
    "forbidden",
    "sound_none",
    "session_ended",
    "too_large",
    "ticket_invalid",
    "ticket_foreign",
)

# The gateway's paths (under the node's gateway URL).
GATEWAY_SCREEN_PATH = "/screen"
GATEWAY_SOUND_PATH = "/sound"
GATEWAY_UPLOAD_PATH = "/files/upload"
GATEWAY_DOWNLOAD_PATH = "/files/download"
GATEWAY_PATHS: dict[str, str] = {
    "screen": GATEWAY_SCREEN_PATH,
    "sound": GATEWAY_SOUND_PATH,
    "upload": GATEWAY_UPLOAD_PATH,
    "download": GATEWAY_DOWNLOAD_PATH,
}
# The portal's own sockets.
UPDATES_PATH = "/ws/updates/"
# The session cards a page may name (?sessions=) for its updates socket to send as they are
# when it opens (the page's catch-up); more is a bad request.
CATCH_UP_MAX = 50
COURSE_PATH = "/ws/courses/{code}/"


def live_wire() -> dict[str, object]:
    """What a page's script needs of the above, as JSON."""
    return {
        "close_codes": CLOSE_CODES,
        "final": list(FINAL_CLOSES),
        "gateway_paths": GATEWAY_PATHS,
        "updates_path": UPDATES_PATH,
        "catch_up_max": CATCH_UP_MAX,
        "course_path": COURSE_PATH,
    }
