"""Pravega's event framing, as its writers send events and its readers find them in a segment's bytes:
each event is ``type (int32, 0 = EVENT) | length (int32) | payload``, back to back. Pure, no I/O.

The stream layer checks that every append to a segment of the ``PRAVEGA_EVENTS`` format is a run of
whole frames (``count_frames``), so a reader parsing the segment by byte offset from any frame boundary
(offset 0, a reader's saved position, a cut) never lands inside an event.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

EVENT_TYPE = 0
FRAME_HEADER = struct.Struct(">ii")
# The most one event may hold, as Pravega's writers bound it (8 MiB); a frame that declares more is no
# event of theirs.
MAX_EVENT_BYTES = 8 * 1024 * 1024


class NotEventFramesError(ValueError):
    """The bytes are not a run of whole Pravega event frames; says where and why."""


def count_frames(data: Buffer) -> int:
    """How many whole event frames ``data`` is, exactly (at least one); NotEventFramesError otherwise."""
    view = memoryview(data)
    size = view.nbytes
    pos = count = 0
    while pos < size:
        if size - pos < FRAME_HEADER.size:
            raise NotEventFramesError(f"{size - pos} bytes at {pos} are too few for an event header")
        kind, length = FRAME_HEADER.unpack_from(view, pos)
        if kind != EVENT_TYPE:
            raise NotEventFramesError(f"the frame at {pos} has type {kind}, not an event's ({EVENT_TYPE})")
        if not 0 <= length <= MAX_EVENT_BYTES:
            raise NotEventFramesError(f"the event at {pos} declares {length} bytes")
        pos += FRAME_HEADER.size + length
        if pos > size:
            raise NotEventFramesError(f"the event at {pos - FRAME_HEADER.size - length} runs past the data's end")
        count += 1
    if not count:
        raise NotEventFramesError("no event at all")
    return count


def frame_event(payload: Buffer) -> bytes:
    """One event as Pravega's writers frame it."""
    view = memoryview(payload)
    return FRAME_HEADER.pack(EVENT_TYPE, view.nbytes) + bytes(view)


def split_frames(data: Buffer) -> tuple[list[bytes], int]:
    """The payloads of the whole frames at the start of ``data`` and how many bytes they take (a read's
    last frame may be cut; it is left for the next read)."""
    view = memoryview(data)
    events = []
    pos = 0
    while view.nbytes - pos >= FRAME_HEADER.size:
        kind, length = FRAME_HEADER.unpack_from(view, pos)
        if kind != EVENT_TYPE or length < 0:
            raise NotEventFramesError(f"no event frame at {pos}")
        end = pos + FRAME_HEADER.size + length
        if end > view.nbytes:
            break
        events.append(bytes(view[pos + FRAME_HEADER.size : end]))
        pos = end
    return events, pos
