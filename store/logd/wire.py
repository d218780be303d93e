"""The logd wire over ZeroMQ, shared by the replica (ROUTER) and its clients (DEALER); no I/O here.

A request is a multipart message ``[header, *payloads]``: ``header`` is a JSON object with ``op``, a
client-chosen ``id`` and the op's arguments; an append carries one payload frame per entry, in the
order of ``entries`` (``[sequence, crc32c]`` pairs). A response is ``[header, *payloads]`` with the
same ``id`` and a ``status``; a read answers ``entries`` as ``[sequence, entry_epoch, crc32c]`` triples
with one payload frame each, and ends early with ``corrupt`` [sequence, entry_epoch] at an entry whose
stored payload no longer matches its CRC-32C (never sent). Payload frames travel untouched (no JSON,
no copy into the header). Headers are compact JSON, made and read by orjson: every append costs the
owner one header out and one in per replica, and the replica one of each, and the standard library's
json took about 11 us for the four where orjson takes 1.

Ops: ``append`` (log, epoch, entry_epoch, first, lac, entries), ``fence`` (log, epoch, first,
entry_epoch), ``read`` (log, from, to, max_bytes), ``truncate`` (log, epoch, upto), ``last_confirmed``
(log). ``epoch`` is the writer's ownership epoch, checked against the replica's fence; ``entry_epoch``
is the epoch the entries belong to (a recovering owner copies an older epoch's entries under its own
fencing epoch).
"""

from __future__ import annotations

from typing import Any

import orjson

OK = "ok"
FENCED = "fenced"  # the request's epoch is older than the newest fence the replica has seen
GAP = "gap"  # an append whose predecessor (same entry epoch) the replica does not hold
CORRUPT = "corrupt"  # a payload that does not match its CRC-32C
STALE = "stale"  # an append of an older entry epoch over a newer entry at the same sequence
BAD_REQUEST = "bad_request"

OPS = ("append", "fence", "read", "truncate", "last_confirmed")


def encode_header(fields: dict[str, Any]) -> bytes:
    """Compact JSON (the same bytes as ``json.dumps(fields, separators=(",", ":"))``). Every value is
    a string, a list or an integer within 64 bits (sequences, epochs, CRCs, ids): orjson refuses a
    larger integer (TypeError) and would read one back as a float, so none may be sent."""
    return orjson.dumps(fields)


def decode_header(frame: bytes | memoryview) -> dict[str, Any]:
    """The header object of a frame; ValueError (orjson's JSONDecodeError) for anything else."""
    value = orjson.loads(frame)
    if not isinstance(value, dict):
        raise ValueError("a logd header must be a JSON object")
    return value
