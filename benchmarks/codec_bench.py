"""Kafka codec micro-benchmark: ProduceRequest v9 decode (one 16 KiB batch) and FetchResponse v12
encode (1 MiB of records). Run: ``.venv/bin/python benchmarks/codec_bench.py``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from millrace.gateway.kafka_protocol import codec  # noqa: E402
from millrace.gateway.kafka_protocol.messages.fetch import FetchResponse  # noqa: E402
from millrace.gateway.kafka_protocol.messages.produce import ProduceRequest  # noqa: E402
from millrace.protocol import records  # noqa: E402

PRODUCE, FETCH = 0, 1


def _rate(fn: Callable[[], object], seconds: float = 1.5) -> float:
    fn()
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(100):
            fn()
        n += 100
    return n / elapsed


def produce_frame() -> bytes:
    recs = [records.NewRecord(b"key-%d" % i, os.urandom(150), (), 1_700_000_000_000 + i) for i in range(100)]
    batch = records.build_record_batch(recs, producer_id=1, producer_epoch=0, base_sequence=0)
    batch = records.build_record_batch(recs[: max(1, 100 * 16384 // len(batch))])
    P = ProduceRequest
    req = P(
        acks=-1,
        timeout_ms=30000,
        topic_data=[P.TopicProduceData(name="bench", partition_data=[P.PartitionProduceData(index=0, records=batch)])],
    )
    return codec.encode_request(PRODUCE, 9, 1, req, client_id="bench")[4:]


def fetch_response() -> FetchResponse:
    F = FetchResponse
    chunk = bytes(1 << 20)
    return F(
        responses=[
            F.FetchableTopicResponse(
                topic="bench",
                partitions=[F.PartitionData(partition_index=0, high_watermark=10, records=memoryview(chunk))],
            )
        ]
    )


def main() -> None:
    frame = produce_frame()

    def decode_and_validate() -> None:
        _, req = codec.decode_request(frame)
        records.validate_produce_records(req.topic_data[0].partition_data[0].records)

    resp = fetch_response()
    print(f"ProduceRequest v9 frame: {len(frame)} bytes")
    print(f"  decode_request:             {_rate(lambda: codec.decode_request(frame)):>10,.0f} ops/s")
    print(f"  decode + batch CRC check:   {_rate(decode_and_validate):>10,.0f} ops/s")
    print("FetchResponse v12 with 1 MiB records:")
    print(f"  encode_response (bytes):   {_rate(lambda: codec.encode_response(FETCH, 12, 1, resp)):>10,.0f} ops/s")
    print(f"  encode_response_parts:     {_rate(lambda: codec.encode_response_parts(FETCH, 12, 1, resp)):>10,.0f} ops/s")


if __name__ == "__main__":
    main()
