"""Counting the keyboard and mouse events in a browser's RFB stream (issue 15, idle detection).

The desktop gateway (:mod:`nodeagent.gateway.screen`) feeds :class:`InputCounter` every
client -> server chunk after the security handshake, as it arrives (WebSocket messages split
and merge RFB messages anywhere). The counter walks the message boundaries and counts
KeyEvent (4), PointerEvent (5) and QEMU's extended KeyEvent (255/0). It keeps no content:
at most a message's fixed-size header is buffered until the rest arrives, and a message's
body (clipboard text included) is skipped by length, never copied.

Message lengths (RFC 6143, and the extensions noVNC sends):

=====  ==========================  ==========================================
 type  message                     length
=====  ==========================  ==========================================
    0  SetPixelFormat              20
    2  SetEncodings                4 + 4 x count (u16 at offset 2)
    3  FramebufferUpdateRequest    10
    4  KeyEvent                    8
    5  PointerEvent                6
    6  ClientCutText               8 + |length| (s32 at offset 4; negative: extended
                                   clipboard, the absolute value)
  150  EnableContinuousUpdates     10
  248  ClientFence                 9 + length (u8 at offset 8)
  250  xvp                         4
  251  SetDesktopSize              8 + 16 x screens (u8 at offset 6)
  255  QEMU client message          submessage 0 (extended KeyEvent): 12
=====  ==========================  ==========================================

A type (or QEMU submessage) not in this table stops the counting for that connection
(:attr:`InputCounter.lost`): the boundaries are no longer known. The gateway passes the bytes
on regardless; only the count stops.
"""

from __future__ import annotations

import struct

KEY_EVENT, POINTER_EVENT, QEMU, QEMU_EXTENDED_KEY = 4, 5, 255, 0

# type -> total length, for fixed-size messages
_FIXED = {0: 20, 3: 10, KEY_EVENT: 8, POINTER_EVENT: 6, 150: 10, 250: 4}
# type -> (header length, function of the header giving the total length)
_VARIABLE = {
    2: (4, lambda h: 4 + 4 * struct.unpack_from(">H", h, 2)[0]),
    6: (8, lambda h: 8 + abs(struct.unpack_from(">i", h, 4)[0])),
    248: (9, lambda h: 9 + h[8]),
    251: (8, lambda h: 8 + 16 * h[6]),
}
_INPUT = frozenset((KEY_EVENT, POINTER_EVENT))


class InputCounter:
    """Counts input messages in a client -> server RFB stream; see the module's docstring.

    ``skip`` bytes are passed over first (the gateway gives 1: the browser's ClientInit).
    :meth:`feed` returns how many input events the chunk completed; :attr:`events` is the
    running total until :meth:`take` resets it.
    """

    __slots__ = ("events", "lost", "_head", "_skip")

    def __init__(self, skip: int = 0) -> None:
        self.events = 0
        self.lost = False  # an unknown message type: counting stopped
        self._head = b""  # the start of a message whose length is not known yet
        self._skip = skip  # bytes of the current message still to pass over

    def take(self) -> int:
        """The events counted since the last take."""
        events, self.events = self.events, 0
        return events

    def feed(self, data: bytes) -> int:
        if self.lost:
            return 0
        size = len(data)
        position = min(self._skip, size)
        self._skip -= position
        counted = 0
        while position < size:
            if self._head:
                data = self._head + data[position:]
                size, position, self._head = len(data), 0, b""
            kind = data[position]
            length = _FIXED.get(kind)
            if length is None:
                needed, length_of = _header(kind, data, position, size)
                if length_of is None:
                    if needed is None:
                        self.lost = True
                        break
                    self._head = data[position:]  # header incomplete: wait for more
                    break
                length = length_of
            if kind in _INPUT or (kind == QEMU and length == 12):
                counted += 1
            position += length
        if position > size:
            self._skip = position - size
        self.events += counted
        return counted


def _header(kind: int, data: bytes, position: int, size: int) -> tuple[int | None, int | None]:
    """For a variable-length (or QEMU) message at ``position``: (header length, total length).
    The total is None while the header is incomplete; both are None for an unknown type."""
    if kind == QEMU:
        if size - position < 2:
            return 2, None
        return (2, 12) if data[position + 1] == QEMU_EXTENDED_KEY else (None, None)
    variable = _VARIABLE.get(kind)
    if variable is None:
        return None, None
    header, total = variable
    if size - position < header:
        return header, None
    return header, total(data[position : position + header])
