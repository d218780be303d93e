"""The generator's data and the Kafka source options (no Spark needed)."""

from __future__ import annotations

import json

from spark_examples.generate import parse_time_ms
from spark_examples.kafka_options import offsets_json, source_options
from spark_examples.readings import generate_readings

START = 1_750_000_000_000


def test_readings_are_late_and_out_of_order_within_bounds() -> None:
    rs = generate_readings(5000, devices=9, start_ms=START, interval_ms=100, late_fraction=0.1,
                           max_lateness_ms=30_000, seed=3)
    assert rs == generate_readings(5000, devices=9, start_ms=START, interval_ms=100, late_fraction=0.1,
                                   max_lateness_ms=30_000, seed=3), "deterministic for a seed"
    assert [r.seq for r in rs] == list(range(5000))
    assert len({r.device for r in rs}) == 9
    out_of_order = sum(1 for a, b in zip(rs, rs[1:], strict=False) if b.ts_ms < a.ts_ms)
    assert 300 < out_of_order < 700, out_of_order
    newest = START
    for r in rs:
        on_time = START + r.seq * 100
        assert on_time - 30_000 < r.ts_ms < on_time + 100, r
        assert r.ts_ms > newest - 30_100, "never later than the bound behind anything produced before it"
        newest = max(newest, r.ts_ms)
    decoded = json.loads(rs[7].value())
    assert decoded == {"device": rs[7].device, "ts_ms": rs[7].ts_ms, "temperature": rs[7].temperature,
                       "humidity": rs[7].humidity, "seq": 7}
    assert rs[7].key() == rs[7].device.encode()


def test_continuing_a_sequence() -> None:
    whole = generate_readings(100, start_ms=START, late_fraction=0.0, seed=5)
    rest = generate_readings(50, start_ms=START, late_fraction=0.0, seed=5, first_seq=50)
    assert [r.seq for r in rest] == list(range(50, 100))
    assert all(START + r.seq * 100 <= r.ts_ms < START + r.seq * 100 + 100 for r in whole + rest)


def test_source_options() -> None:
    assert source_options("h:1", "t") == {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "true"}
    opts = source_options("h:1", "t", starting_offsets=offsets_json("t", {1: -2, 0: 5}), ending_offsets="latest",
                          starting_timestamp=10, ending_timestamp=20, max_offsets_per_trigger=100,
                          extra={"kafka.client.id": "x"})
    assert json.loads(opts["startingOffsets"]) == {"t": {"0": 5, "1": -2}}
    assert (opts["endingOffsets"], opts["startingTimestamp"], opts["endingTimestamp"]) == ("latest", "10", "20")
    assert opts["maxOffsetsPerTrigger"] == "100" and opts["kafka.client.id"] == "x"
    # A partition with nothing at or after the start must not abort the query (Spark's default is "error").
    assert opts["startingOffsetsByTimestampStrategy"] == "latest"
    assert "startingOffsetsByTimestampStrategy" not in source_options("h:1", "t", ending_timestamp=20)


def test_parse_time() -> None:
    assert parse_time_ms("1750000000000") == 1_750_000_000_000
    assert parse_time_ms("2025-06-15T15:06:40Z") == 1_750_000_000_000
    assert parse_time_ms("2025-06-15T15:06:40") == 1_750_000_000_000
    assert parse_time_ms("2025-06-15T17:06:40+02:00") == 1_750_000_000_000
