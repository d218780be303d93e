"""Shared record sets and checks for the Kafka client compatibility tests.

Every client test produces a known list of records, learns from the client's own delivery reports
where each landed (partition, offset), and then reads everything back. The checks are exact: keys,
values and headers byte for byte (None stays None), offsets dense from 0 in each partition in the
order the producer sent them, and per-partition order preserved on the way out."""

from __future__ import annotations

import base64
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BIG_VALUE_BYTES = 1024 * 1024  # 1 MiB record values
# Producer and consumer limits raised above a 1 MiB record plus framing; the server takes up to 8 MiB.
MAX_REQUEST_BYTES = 4 * 1024 * 1024

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()

    def short(self) -> str:
        def b(x: bytes | None) -> str:
            return "None" if x is None else (repr(x[:24]) + (f"..({len(x)}B)" if len(x) > 24 else ""))

        return f"Rec(key={b(self.key)}, value={b(self.value)}, headers={[(k, b(v)) for k, v in self.headers]})"


@dataclass(frozen=True)
class Placed:
    """A record as a client saw it in the log."""

    partition: int
    offset: int
    rec: Rec


def sample_records(tag: str, count: int = 24, big: int = 1, null_header_values: bool = False,
                   both_null: bool = True) -> list[Rec]:
    """``count`` records mixing every shape a client must carry: plain, keyed, binary, empty, with
    headers (repeated keys, binary and empty values), a null key, a null value, both null, and
    ``big`` values of exactly 1 MiB (random, so no codec shrinks them). ``both_null=False`` for clients
    that refuse a record with neither key nor value (kafka-python)."""
    rng = random.Random(tag)
    recs: list[Rec] = []
    for i in range(count):
        key: bytes | None = f"{tag}-key-{i % 7}".encode()
        value: bytes | None = f"{tag}-value-{i}-".encode() + bytes(rng.randrange(256) for _ in range(i * 3))
        headers: tuple[Header, ...] = ()
        kind = i % 8
        if kind == 1:
            headers = (("trace", f"t{i}".encode()), ("bin", bytes(range(256))))
        elif kind == 2:
            key = None
        elif kind == 3:
            value = None
            headers = (("dup", b"1"), ("dup", b"2"), ("empty", b""))
        elif kind == 4:
            key, value = None, (None if both_null else b"")
        elif kind == 5:
            key, value = b"", b""
        elif kind == 6 and null_header_values:
            headers = (("nullvalue", None), ("x", b"y"))
        recs.append(Rec(key, value, headers))
    for j in range(big):
        recs.insert(len(recs) // 2 + j, Rec(f"{tag}-big-{j}".encode(), rng.randbytes(BIG_VALUE_BYTES),
                                            (("size", b"1MiB"),)))
    return recs


def expect_dense(sent: Sequence[Rec], placements: Sequence[tuple[int, int]]) -> dict[int, list[Placed]]:
    """``placements[i]`` is (partition, offset) the producer reported for ``sent[i]``. Offsets must be
    dense from 0 within each partition, in send order. Returns partition -> records by offset."""
    assert len(placements) == len(sent), f"{len(placements)} delivery reports for {len(sent)} records"
    by_partition: dict[int, list[Placed]] = defaultdict(list)
    for rec, (partition, offset) in zip(sent, placements, strict=True):
        by_partition[partition].append(Placed(partition, offset, rec))
    for partition, placed in by_partition.items():
        offsets = [p.offset for p in placed]
        assert offsets == list(range(len(placed))), (
            f"partition {partition}: producer-reported offsets in send order are {offsets}, "
            f"expected dense 0..{len(placed) - 1}")
    return dict(by_partition)


def check_consumed(expected: dict[int, list[Placed]], consumed: Iterable[Placed], *, start: dict[int, int] | None = None,
                   ) -> None:
    """``consumed`` (in the order the client delivered it) must hold exactly the expected records of each
    partition from ``start[partition]`` (default 0) on, in offset order, with no duplicates."""
    got: dict[int, list[Placed]] = defaultdict(list)
    for p in consumed:
        got[p.partition].append(p)
    assert set(got) <= set(expected), f"records from unexpected partitions {sorted(set(got) - set(expected))}"
    for partition, placed in expected.items():
        first = (start or {}).get(partition, 0)
        want = [p for p in placed if p.offset >= first]
        have = got.get(partition, [])
        have_offsets = [p.offset for p in have]
        want_offsets = [p.offset for p in want]
        assert have_offsets == want_offsets, (
            f"partition {partition}: consumed offsets {have_offsets}, expected {want_offsets}")
        for w, h in zip(want, have, strict=True):
            assert h.rec == w.rec, f"partition {partition} offset {w.offset}: got {h.rec.short()}, sent {w.rec.short()}"


def placed_count(expected: dict[int, list[Placed]], start: dict[int, int] | None = None) -> int:
    return sum(1 for ps in expected.values() for p in ps if p.offset >= (start or {}).get(p.partition, 0))


T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2) -> T:
    """Polls ``fn`` until it returns something truthy; fails the test naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def b64(data: bytes | None) -> str:
    return "-" if data is None else "=" + base64.b64encode(data).decode()


def unb64(field: str | None) -> bytes | None:
    if field is None or field == "-":
        return None
    assert field.startswith("="), field
    return base64.b64decode(field[1:])


def records_to_lines(recs: Sequence[Rec]) -> str:
    """One record a line for the Java programs: key, value, then header name/value pairs, tab-separated;
    bytes as ``=base64``, null as ``-``, header names base64 too."""
    lines = []
    for r in recs:
        fields = [b64(r.key), b64(r.value)]
        for name, value in r.headers:
            fields += [b64(name.encode()), b64(value)]
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n"
