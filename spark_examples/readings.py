"""IoT-style sensor readings: the generator's data model, with no Spark or Kafka dependency.

Reading i happens at ``start_ms + i * interval_ms`` plus jitter within the interval, from one of ``devices``
sensors. A ``late_fraction`` of readings arrive late: their event time is moved back by up to
``max_lateness_ms``, so they land out of order among newer readings (keep ``max_lateness_ms`` below the
streaming pipeline's watermark delay and no reading is dropped as too late)."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Reading:
    device: str
    ts_ms: int  # event time, epoch milliseconds (also the Kafka record timestamp)
    temperature: float
    humidity: float
    seq: int  # position in the generated sequence

    def key(self) -> bytes:
        return self.device.encode()

    def value(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


def device_name(n: int) -> str:
    return f"sensor-{n:04d}"


def generate_readings(count: int, *, devices: int = 20, start_ms: int, interval_ms: int = 100,
                      late_fraction: float = 0.05, max_lateness_ms: int = 30_000, seed: int = 1,
                      first_seq: int = 0) -> list[Reading]:
    """``count`` readings in production order (the order a producer sends them)."""
    if interval_ms <= 0 or devices <= 0 or count < 0:
        raise ValueError("count >= 0, devices > 0 and interval_ms > 0 are required")
    rng = random.Random(f"{seed}/{first_seq}")
    baseline = {d: 15.0 + (d * 7919 % 100) / 10.0 for d in range(devices)}  # each sensor its own climate
    out: list[Reading] = []
    for i in range(count):
        seq = first_seq + i
        d = rng.randrange(devices)
        ts = start_ms + seq * interval_ms + rng.randrange(interval_ms)
        if late_fraction > 0 and rng.random() < late_fraction:
            ts -= rng.randrange(1, max(2, max_lateness_ms))
        temperature = round(baseline[d] + rng.gauss(0.0, 1.5), 2)
        humidity = round(min(100.0, max(0.0, 45.0 + rng.gauss(0.0, 8.0))), 1)
        out.append(Reading(device_name(d), ts, temperature, humidity, seq))
    return out
