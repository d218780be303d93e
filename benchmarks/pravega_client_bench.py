"""Pravega's official client (``pravega`` 0.3.8, the Rust client's Python binding) beside Millrace's own
client, on the same server in the same run.

For each event size the same number of events, with routing keys over 64 keys, goes to a fresh stream
of 4 fixed segments twice: through Pravega's ``StreamWriter.write_event_async`` (the Pravega segment
store listener, events kept in Pravega's framing) and through Millrace's ``EventStreamWriter`` (the
native listener, events as Kafka batches), one writer each, as fast as it takes them, then flushed. Then
a reader group of one reader of each client reads its stream from the head. Reports events/s and MB/s
of payload for each.

    .venv/bin/python -m benchmarks.pravega_client_bench [--events 20000] [--sizes 100,1000]

Never a test: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time

import pravega_client

from millrace import StreamManager
from tests.server_process import ServerProcess

SEGMENTS = 4
KEYS = 64
# Pravega writes awaited at once: its writer batches what it holds, as a producer's linger would.
IN_FLIGHT = 1000


def pravega_write(manager: pravega_client.StreamManager, stream: str, payload: bytes, events: int) -> float:
    writer = manager.create_writer("bench", stream)
    text = payload.decode("latin-1")  # write_event_async takes a str; latin-1 keeps one byte per character

    async def write() -> None:
        pending = []
        for i in range(events):
            pending.append(writer.write_event_async(text, f"key-{i % KEYS}"))
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)

    start = time.perf_counter()
    asyncio.run(write())
    writer.flush()
    return time.perf_counter() - start


def pravega_read(manager: pravega_client.StreamManager, stream: str, events: int) -> tuple[float, int]:
    reader = manager.create_reader_group(f"g-{stream}", "bench", stream).create_reader("r1")

    async def read() -> int:
        count = 0
        while count < events:
            piece = await asyncio.wait_for(reader.get_segment_slice_async(), 60)
            count += sum(1 for _ in piece)
            reader.release_segment(piece)
        return count

    start = time.perf_counter()
    count = asyncio.run(read())
    elapsed = time.perf_counter() - start
    reader.reader_offline()
    return elapsed, count


def millrace_write(manager: StreamManager, stream: str, payload: bytes, events: int) -> float:
    with manager.create_writer("bench", stream) as writer:
        start = time.perf_counter()
        for i in range(events):
            writer.write_event(payload, routing_key=f"key-{i % KEYS}")
        writer.flush()
        return time.perf_counter() - start


def millrace_read(manager: StreamManager, stream: str, events: int) -> tuple[float, int]:
    reader = manager.create_reader_group(f"g-{stream}", "bench", stream).create_reader("r1")
    start = time.perf_counter()
    count = 0
    while count < events:
        if reader.read_next_event(timeout=30.0) is None:
            break
        count += 1
    elapsed = time.perf_counter() - start
    reader.close()
    return elapsed, count


def rates(events: int, size: int, seconds: float) -> dict[str, float]:
    return {"events_per_s": round(events / seconds), "mb_per_s": round(events * size / seconds / 1e6, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--sizes", default="100,1000")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as home, ServerProcess(
            os.path.join(home, "data"), "--pravega-controller-port", "0", "--pravega-segment-port", "0") as server:
        pravega = pravega_client.StreamManager(f"tcp://127.0.0.1:{server.pravega_controller_port}")
        pravega.create_scope("bench")
        with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as millrace:
            for size in (int(s) for s in args.sizes.split(",")):
                payload = bytes(range(97, 123)) * (size // 26 + 1)
                payload = payload[:size]
                for client in ("pravega", "millrace"):
                    stream = f"{client}-{size}"
                    pravega.create_stream("bench", stream, SEGMENTS)
                    if client == "pravega":
                        wrote = pravega_write(pravega, stream, payload, args.events)
                        read, count = pravega_read(pravega, stream, args.events)
                    else:
                        wrote = millrace_write(millrace, stream, payload, args.events)
                        read, count = millrace_read(millrace, stream, args.events)
                    result = {"client": client, "event_bytes": size, "events": args.events,
                              "write": rates(args.events, size, wrote), "read": rates(count, size, read),
                              "read_events": count}
                    print(json.dumps(result), flush=True)
                    results.append(result)


if __name__ == "__main__":
    main()
