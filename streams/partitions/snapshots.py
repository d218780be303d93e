"""Partition-state snapshots: what a load would rebuild from a topic's index segments (offset indexes,
producer windows, open and aborted transactions), stored so that the next load starts from it and
replays only the batches written since. Restart time then follows what was written since the last
snapshot, not how much the topic holds. Kafka keeps the same two things apart: producer-state snapshots
and the recovery point past which a restart rescans the log.

A snapshot covers, per data segment, a prefix of its index segment and of its data (``Coverage``). It is
built on a worker thread from durable store data only, by the same rules a load applies
(``loading.replay``), never from the reactor's live partitions: what it holds is exactly what a load at
that moment would have built, so a load from it and a full load agree (``tests/kafka/test_snapshots.py``).
It is a hint, never the truth: a load that finds it stale (a segment it names gone while entries still
point there, a coverage beyond what the store holds, another topic's id) does a full load instead.

Stored in one segment per topic (``<scope>/<stream>/kafka-state``), outside the stream's history: each
snapshot is appended whole (``payload, trailer``; the trailer names the payload's length, CRC and a
magic) and the older ones are truncated away; a load reads the trailer at the segment's end. Appends are
conditional on the length read, so two nodes snapshotting one topic never interleave.

Not for compacted topics: their cleaner rewrites the prefix a snapshot would cover (they load in full).
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
import sys
from array import array
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c
from twisted.internet.interfaces import IReactorTime

from millrace.store.contracts import SegmentService
from millrace.store.errors import SegmentExistsError, SegmentNotFoundError
from millrace.streams.partitions.offset_index import OffsetIndex
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.producers import Producers
from millrace.streams.partitions.segments import BLOCKING_TIMEOUT, Coverage, SegmentWriter, read_fully
from millrace.streams.partitions.transactions import PartitionTransactions
from millrace.streams.topics import TopicInfo

log = logging.getLogger(__name__)

STATE_SEGMENT = "kafka-state"
FORMAT_VERSION = 1
_MAGIC = b"MRSTATE1"
_TRAILER = struct.Struct(">QI8s")  # payload length, crc32c of the payload, magic
_HEADER_LENGTH = struct.Struct(">I")
_APPEND_PIECE = 8 << 20  # a large snapshot goes in appends of this size (the store caps one append)
_TYPECODES = [column.typecode for column in OffsetIndex().columns()]


class StaleSnapshot(Exception):
    """A snapshot that no longer matches the store: the load starts over without it."""


def state_segment(scope: str, stream: str) -> str:
    """The segment holding the snapshots of the topic (or partitioned stream) ``scope/stream``."""
    return f"{scope}/{stream}/{STATE_SEGMENT}"


@dataclass
class TopicSnapshot:
    """A decoded snapshot. Its partitions name their segments through stand-in writers until a load
    hands them the real ones (``PartitionLog.adopt``)."""

    partitions: list[PartitionLog]
    covered: dict[str, Coverage]


def encode(topic: TopicInfo, parts: list[PartitionLog], covered: dict[str, Coverage]) -> bytes:
    header = {
        "version": FORMAT_VERSION,
        "topic_id": str(topic.topic_id),
        "byteorder": sys.byteorder,
        "covered": {name: [c.index_bytes, c.index_reach, c.data_end] for name, c in covered.items()},
        "partitions": [{
            "segments": [w.name for w in p.segments],
            "entries": len(p.index),
            "dense_from": p.index.dense_from,
            "producers": p.producers.snapshot(),
            "open": sorted(p.txns.open.items()),
            "aborted": [list(a) for a in p.txns.aborted],
        } for p in parts],
    }
    blob = json.dumps(header, separators=(",", ":")).encode()
    out = [_HEADER_LENGTH.pack(len(blob)), blob]
    for p in parts:
        out += [column.tobytes() for column in p.index.columns()]
    return b"".join(out)


def decode(store: SegmentService, clock: IReactorTime, topic: TopicInfo, payload: bytes) -> TopicSnapshot | None:
    """The snapshot in ``payload``, or None if it is of another topic (one deleted and created again
    under the name) or of another format."""
    (length,) = _HEADER_LENGTH.unpack_from(payload)
    header: dict[str, Any] = json.loads(payload[_HEADER_LENGTH.size:_HEADER_LENGTH.size + length])
    if header.get("version") != FORMAT_VERSION or header.get("topic_id") != str(topic.topic_id):
        return None
    at = _HEADER_LENGTH.size + length
    data = memoryview(payload)
    stand_ins: dict[str, SegmentWriter] = {}
    parts = []
    for number, described in enumerate(header["partitions"]):
        columns = []
        for typecode in _TYPECODES:
            column = array(typecode)
            size = column.itemsize * described["entries"]
            column.frombytes(data[at:at + size])
            if header["byteorder"] != sys.byteorder:
                column.byteswap()
            columns.append(column)
            at += size
        p = PartitionLog(topic.name, number)
        p.index = OffsetIndex.restored(columns, described["dense_from"])
        for name in described["segments"]:
            p.segment_number(stand_ins.setdefault(name, SegmentWriter(store, clock, name, 0, 0)))
        p.producers = Producers.restored(described["producers"])
        p.txns = PartitionTransactions.restored(dict(described["open"]), described["aborted"])
        parts.append(p)
    covered = {name: Coverage(*numbers) for name, numbers in header["covered"].items()}
    return TopicSnapshot(parts, covered)


def read_snapshot(store: SegmentService, clock: IReactorTime, topic: TopicInfo, segment: str) -> TopicSnapshot | None:
    """Blocking: the newest snapshot in ``segment`` if there is a whole one of ``topic``."""
    try:
        info = store.get_info(segment)
    except SegmentNotFoundError:
        return None
    if info.length - info.start_offset < _TRAILER.size:
        return None
    length, crc, magic = _TRAILER.unpack(read_fully(store, segment, info.length - _TRAILER.size, _TRAILER.size))
    start = info.length - _TRAILER.size - length
    if magic != _MAGIC or start < info.start_offset:
        log.warning("%s does not end in a whole snapshot; the topic loads in full", segment)
        return None
    payload = read_fully(store, segment, start, length)
    if len(payload) != length or crc32c(payload) != crc:
        log.warning("the snapshot in %s is damaged; the topic loads in full", segment)
        return None
    return decode(store, clock, topic, payload)


def write_snapshot(store: SegmentService, segment: str, payload: bytes) -> None:
    """Blocking: append ``payload`` as the newest snapshot of ``segment`` and drop the older ones. Raises
    BadOffsetError if another writer appended meanwhile (its snapshot stands)."""
    with contextlib.suppress(SegmentExistsError):
        if not store.exists(segment):
            store.create_segment(segment).result(BLOCKING_TIMEOUT)
    at = store.get_info(segment).length
    record = memoryview(payload + _TRAILER.pack(len(payload), crc32c(payload), _MAGIC))
    for piece in range(0, len(record), _APPEND_PIECE):
        store.append(segment, bytes(record[piece:piece + _APPEND_PIECE]),
                     expected_offset=at + piece).result(BLOCKING_TIMEOUT)
    if at:
        store.truncate(segment, at).result(BLOCKING_TIMEOUT)


def delete_snapshots(store: SegmentService, scope: str, stream: str) -> None:
    """Blocking (a deleted topic): its snapshots."""
    with contextlib.suppress(SegmentNotFoundError):
        store.delete(state_segment(scope, stream)).result(BLOCKING_TIMEOUT)

