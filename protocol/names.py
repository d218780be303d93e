"""Scope, stream and segment names, and segment ids (as in Pravega), shared by server and client.

A segment is named ``scope/stream/<number>.#epoch.<epoch>``: ``number`` is unique within the
stream and ``epoch`` is the epoch that created it. Its id packs both: ``(epoch << 32) | number``.
"""

from __future__ import annotations

import re

EPOCH_DELIMITER = ".#epoch."
SYSTEM_SCOPE = "_system"
# A stream's watermark companion, <scope>/_MARK<stream> (Pravega's mark stream): the client's writers
# note their times there, and the controller deletes it with its stream.
MARK_STREAM_PREFIX = "_MARK"
READER_GROUP_STREAM_PREFIX = "_RG"  # a reader group's state stream: <scope>/_RG<name>, as Pravega names it
# Millrace's own streams beside the user's. No Kafka topic or user-named stream may take these prefixes
# (the gateway refuses them at creation), so a name alone says a stream is one of these.
INTERNAL_STREAM_PREFIXES = (READER_GROUP_STREAM_PREFIX, MARK_STREAM_PREFIX)


def is_internal_stream_name(stream: str) -> bool:
    return stream.startswith(INTERNAL_STREAM_PREFIXES)

# Kafka's topic alphabet, so every topic name is a valid stream name; "/" separates name parts.
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SEGMENT = re.compile(r"^([^/]+)/([^/]+)/(\d+)\.#epoch\.(\d+)$")


def validate_name(kind: str, name: str) -> None:
    """ValueError unless ``name`` is a legal scope or stream name."""
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
        raise ValueError(f"invalid {kind} name {name!r}: 1-249 characters of [A-Za-z0-9._-]")


def segment_id(number: int, epoch: int) -> int:
    if not (0 <= number < 1 << 32 and 0 <= epoch < 1 << 31):
        raise ValueError(f"segment number {number} / epoch {epoch} out of range")
    return (epoch << 32) | number


def segment_number(sid: int) -> int:
    return sid & 0xFFFFFFFF


def segment_epoch(sid: int) -> int:
    """The epoch that created the segment."""
    return sid >> 32


def segment_name(scope: str, stream: str, sid: int) -> str:
    return f"{scope}/{stream}/{segment_number(sid)}{EPOCH_DELIMITER}{segment_epoch(sid)}"


def parse_segment_name(name: str) -> tuple[str, str, int]:
    """(scope, stream, segment id) of a stream segment's name; ValueError otherwise."""
    m = _SEGMENT.match(name)
    if m is None:
        raise ValueError(f"not a stream segment name: {name!r}")
    return m.group(1), m.group(2), segment_id(int(m.group(3)), int(m.group(4)))
