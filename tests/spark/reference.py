"""An independent, pure-Python computation of the pipelines' aggregates, to check Spark's against."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_examples.readings import Reading

WindowKey = tuple[str, int]  # (device, window start in epoch ms)


@dataclass(frozen=True)
class Agg:
    readings: int
    avg_temperature: float
    min_temperature: float
    max_temperature: float
    avg_humidity: float


def aggregates(readings: Iterable[Reading], window_ms: int = 60_000) -> dict[WindowKey, Agg]:
    """Tumbling windows aligned to the epoch, as Spark's window() aligns them."""
    groups: dict[WindowKey, list[Reading]] = {}
    for r in readings:
        groups.setdefault((r.device, r.ts_ms - r.ts_ms % window_ms), []).append(r)
    return {k: Agg(len(rs), math.fsum(r.temperature for r in rs) / len(rs), min(r.temperature for r in rs),
                   max(r.temperature for r in rs), math.fsum(r.humidity for r in rs) / len(rs))
            for k, rs in groups.items()}


def closed_by(expected: Mapping[WindowKey, Agg], watermark_ms: int, window_ms: int = 60_000,
              ) -> dict[WindowKey, Agg]:
    """The windows a streaming query in append mode has emitted once its watermark reached ``watermark_ms``."""
    return {k: v for k, v in expected.items() if k[1] + window_ms <= watermark_ms}


def from_rows(rows: Iterable[Any], window_ms: int = 60_000) -> dict[WindowKey, Agg]:
    """Spark's aggregate rows (Row or dict with logic.AGGREGATE_COLUMNS); fails on a duplicate window."""
    out: dict[WindowKey, Agg] = {}
    for row in rows:
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        key = (d["device"], int(d["window_start_ms"]))
        assert key not in out, f"window {key} written twice"
        assert int(d["window_end_ms"]) - key[1] == window_ms, d
        out[key] = Agg(int(d["readings"]), float(d["avg_temperature"]), float(d["min_temperature"]),
                       float(d["max_temperature"]), float(d["avg_humidity"]))
    return out


def assert_same(got: Mapping[WindowKey, Agg], want: Mapping[WindowKey, Agg]) -> None:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, (f"{len(missing)} windows missing (first {missing[:5]}), "
                                       f"{len(extra)} unexpected (first {extra[:5]}) of {len(want)}")
    for k, w in want.items():
        g = got[k]
        assert g.readings == w.readings, (k, g, w)
        assert (g.min_temperature, g.max_temperature) == (w.min_temperature, w.max_temperature), (k, g, w)
        assert math.isclose(g.avg_temperature, w.avg_temperature, rel_tol=1e-9), (k, g, w)
        assert math.isclose(g.avg_humidity, w.avg_humidity, rel_tol=1e-9), (k, g, w)
