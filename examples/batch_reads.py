"""A stream's history read in parallel with the batch client: one task per segment range, in worker
processes (each with its own connection), then only what came after a stream cut, in threads.

    python examples/batch_reads.py tcp://127.0.0.1:9090
"""

from __future__ import annotations

import multiprocessing
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from millrace import BatchClient, JsonSerializer, SegmentRange, StreamManager

SENSORS = ("sensor-1", "sensor-2", "sensor-3", "sensor-4")
_worker: BatchClient | None = None  # each worker process's own client


def open_worker(uri: str) -> None:
    global _worker
    _worker = StreamManager(uri).create_batch_client()


def summarize(segment_range: SegmentRange) -> tuple[int, Counter[str]]:
    """What one task does with its range: count the events and add up the readings per sensor."""
    assert _worker is not None
    totals: Counter[str] = Counter()
    count = 0
    for event in _worker.read_segment(segment_range, JsonSerializer()):
        totals[event.routing_key or ""] += event.data["reading"]
        count += 1
    return count, totals


def main(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("batch-tutorial")
        sm.create_stream("batch-tutorial", "readings", initial_segments=2)
        with sm.create_writer("batch-tutorial", "readings", JsonSerializer()) as writer:
            for i in range(250):
                for sensor in SENSORS:
                    writer.write_event({"sensor": sensor, "reading": i}, routing_key=sensor)
                if i == 124:  # halfway, the stream scales: its history now has two epochs
                    first = sm.describe_stream("batch-tutorial", "readings").segments[0].segment
                    sm.split_segment("batch-tutorial", "readings", first)
                    writer.flush()
                    halfway = sm.tail_cut("batch-tutorial", "readings")

        batch = sm.create_batch_client()
        ranges = batch.list_segments("batch-tutorial", "readings")  # head to tail
        for r in ranges:
            print(f"segment {r.segment_id >> 32}.{r.segment_id & 0xFFFFFFFF} "
                  f"[{r.key_start:.2f}, {r.key_end:.2f}) bytes {r.start_offset}-{r.end_offset}")

        # Ranges are independent: any worker reads any of them. Processes sidestep the GIL, since
        # decoding events is Python work; "spawn" gives each a clean interpreter and its own connection.
        with ProcessPoolExecutor(2, multiprocessing.get_context("spawn"), open_worker, (uri,)) as pool:
            results = list(pool.map(summarize, ranges))
        events = sum(count for count, _ in results)
        totals = sum((t for _, t in results), Counter())
        print(f"{len(ranges)} ranges, {events} events")
        for sensor in SENSORS:
            print(f"{sensor}: sum of readings {totals[sensor]}")

        # Only what was written after the cut, read in threads this time.
        later = batch.list_segments("batch-tutorial", "readings", from_cut=halfway)
        with ThreadPoolExecutor(4) as threads:
            counts = threads.map(lambda r: sum(1 for _ in batch.read_segment(r)), later)
            print(f"after the halfway cut: {sum(counts)} events")

        sm.seal_stream("batch-tutorial", "readings")
        sm.delete_stream("batch-tutorial", "readings")


if __name__ == "__main__":
    main(sys.argv[1])
