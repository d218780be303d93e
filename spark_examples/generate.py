"""Produces IoT sensor readings into a Millrace topic through the Kafka protocol, with a progress bar.

    spark_examples/run.sh generate --bootstrap 127.0.0.1:9092 --topic sensor-readings --count 200000

Each record: key = device id, value = the reading as JSON, Kafka timestamp = the reading's event time (so the
historical pipeline can rewind "by timestamp" to event times). The producer is idempotent with acks=all,
like every modern Kafka client's default."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from spark_examples.readings import Reading, generate_readings


class ProgressBar:
    """A one-line progress bar on a terminal (plain periodic lines when not a terminal)."""

    def __init__(self, total: int, label: str, stream: TextIO = sys.stderr, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self.last_draw = self.start
        self.done = 0
        self.drawn = -1

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self.last_draw >= (0.1 if self.tty else 5.0) or self.done >= self.total):
            self.last_draw = now
            self.draw(now)

    def draw(self, now: float) -> None:
        frac = min(1.0, self.done / self.total)
        rate = self.done / max(now - self.start, 1e-6)
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        line = (f"{self.label} [{bar}] {self.done}/{self.total} {frac:6.1%} "
                f"{rate:,.0f} rec/s eta {eta:5.1f}s")
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        self.drawn = self.done
        self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.drawn != self.done:
            self.draw(time.monotonic())
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()


def ensure_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    """Creates ``topic`` with ``partitions`` partitions and topic ``configs`` unless it exists."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=20).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                            config=dict(configs or {}))])
    try:
        futures[topic].result(30)
    except Exception as e:  # a concurrent creator won the race: fine
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise


def produce(bootstrap: str, topic: str, readings: Sequence[Reading], *, rate: float = 0.0,
            progress: bool = True, extra_config: dict[str, Any] | None = None) -> list[tuple[int, int]]:
    """Sends ``readings`` in order; returns (partition, offset) per reading from the delivery reports.
    ``rate`` > 0 paces sending to that many readings per second (a live feed); 0 sends as fast as possible."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "compression.type": "lz4", **(extra_config or {})})
    placements: list[tuple[int, int] | None] = [None] * len(readings)
    errors: list[str] = []
    bar = ProgressBar(len(readings), f"{topic}", enabled=progress)

    def delivered(index: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                placements[index] = (msg.partition(), msg.offset())
            bar.update()
        return cb

    started = time.monotonic()
    for i, r in enumerate(readings):
        if rate > 0:
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)
        while True:
            try:
                producer.produce(topic, key=r.key(), value=r.value(), timestamp=r.ts_ms, on_delivery=delivered(i))
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
        producer.poll(0)
        if errors:
            break
    remaining = producer.flush(120)
    bar.close()
    if errors:
        raise KafkaException(f"{len(errors)} readings not delivered, first: {errors[0]}")
    if remaining:
        raise RuntimeError(f"{remaining} readings still undelivered after 120 s")
    return [p for p in placements if p is not None]


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC unless it says otherwise)."""
    if text.lstrip("-").isdigit():
        return int(text)
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        from datetime import UTC
        dt = dt.replace(tzinfo=UTC)
    return round(dt.timestamp() * 1000)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spark_examples/run.sh generate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="Millrace's Kafka listener (host:port)")
    ap.add_argument("--topic", default="sensor-readings")
    ap.add_argument("--partitions", type=int, default=4, help="partitions if the topic is created (default 4)")
    ap.add_argument("--segments", type=int, default=1,
                    help="segments carrying those partitions at creation (millrace.segments.initial; must divide "
                         "--partitions; default 1, so `millrace streams split` can split it along partitions)")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="any other topic config if the topic is created, e.g. millrace.scaling.type=by_event_rate")
    ap.add_argument("--count", type=int, default=100_000, help="readings to produce")
    ap.add_argument("--devices", type=int, default=50)
    ap.add_argument("--interval-ms", type=int, default=100, help="event time between consecutive readings")
    ap.add_argument("--start", default=None,
                    help="event time of the first reading (epoch ms or ISO-8601); default: so the last is now")
    ap.add_argument("--first-seq", type=int, default=0,
                    help="continue a sequence: reading i has event time start + (first_seq + i) * interval")
    ap.add_argument("--late-fraction", type=float, default=0.05, help="share of readings arriving late")
    ap.add_argument("--max-lateness-s", type=float, default=30.0,
                    help="how late at most (keep below the streaming pipeline's --watermark)")
    ap.add_argument("--rate", type=float, default=0.0, help="readings per second (0: as fast as possible)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    if args.start is not None:
        start_ms = parse_time_ms(args.start)
    else:
        start_ms = int(time.time() * 1000) - (args.first_seq + args.count) * args.interval_ms
    readings = generate_readings(args.count, devices=args.devices, start_ms=start_ms,
                                 interval_ms=args.interval_ms, late_fraction=args.late_fraction,
                                 max_lateness_ms=int(args.max_lateness_s * 1000), seed=args.seed,
                                 first_seq=args.first_seq)
    configs = {"millrace.segments.initial": str(args.segments), **dict(c.split("=", 1) for c in args.config)}
    ensure_topic(args.bootstrap, args.topic, args.partitions, configs)
    t0 = time.monotonic()
    placements = produce(args.bootstrap, args.topic, readings, rate=args.rate, progress=not args.no_progress)
    late = sum(1 for a, b in zip(readings, readings[1:], strict=False) if b.ts_ms < a.ts_ms)
    print(f"produced {len(placements)} readings to {args.topic} in {time.monotonic() - t0:.1f}s "
          f"({len({p for p, _ in placements})} partitions, {late} out of order); event times "
          f"{min(r.ts_ms for r in readings) if readings else '-'}..{max(r.ts_ms for r in readings) if readings else '-'} ms; "
          f"next --first-seq {args.first_seq + args.count} --start {start_ms}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
