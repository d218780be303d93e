"""The pipelines' transformation on local[2] Spark without the Kafka connector: the same functions the
streaming and historical pipelines run, fed from a static DataFrame or the text file source, checked against
an independent pure-Python computation (tests/spark/reference.py)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from spark_examples.readings import Reading, generate_readings
from tests.spark import reference
from tests.spark.conftest import pyspark_missing

if pyspark_missing():
    pytest.skip(str(pyspark_missing()), allow_module_level=True)

from spark_examples.historical_pipeline import compare, historical_aggregates  # noqa: E402
from spark_examples.logic import AGGREGATE_COLUMNS, aggregate, as_kafka_records  # noqa: E402
from spark_examples.streaming_pipeline import await_queries, start_pipeline  # noqa: E402

pytestmark = pytest.mark.timeout(600)

START = 1_750_000_037_000  # not on a minute boundary
READINGS = generate_readings(6000, devices=7, start_ms=START, interval_ms=100, late_fraction=0.1,
                             max_lateness_ms=30_000, seed=11)


def values_frame(spark: Any, readings: list[Reading], junk: bool = False) -> Any:
    rows = [(r.value(),) for r in readings]
    if junk:
        rows += [(b"not json",), (b'{"device": null, "ts_ms": 1}',), (b'{"device": "x"}',)]
    return spark.createDataFrame(rows, "value binary")


def test_batch_aggregates_match_reference(spark: Any) -> None:
    got = reference.from_rows(historical_aggregates(values_frame(spark, READINGS, junk=True)).collect())
    reference.assert_same(got, reference.aggregates(READINGS))


def test_two_minute_windows_and_kafka_records(spark: Any) -> None:
    some = READINGS[:2000]
    agg = aggregate(values_frame(spark, some), window="2 minutes", watermark=None)
    want = reference.aggregates(some, window_ms=120_000)
    records = as_kafka_records(agg).collect()
    assert len(records) == len(want)
    decoded = []
    for rec in records:
        value = json.loads(rec["value"])
        assert rec["key"] == value["device"] and list(value) == AGGREGATE_COLUMNS
        decoded.append(value)
    reference.assert_same(reference.from_rows(decoded, window_ms=120_000), want)


def test_compare_history_with_production(spark: Any) -> None:
    history = historical_aggregates(values_frame(spark, READINGS[:3000]))
    production = history.where("window_start_ms < 1750000200000").union(
        history.where("window_start_ms >= 1750000200000 AND window_start_ms < 1750000260000")
        .selectExpr(*[c if c != "readings" else "readings + 1 AS readings" for c in AGGREGATE_COLUMNS]))
    total = history.count()
    before = history.where("window_start_ms < 1750000200000").count()
    changed = history.where("window_start_ms >= 1750000200000 AND window_start_ms < 1750000260000").count()
    assert compare(history, production) == {"same": before, "different": changed,
                                            "only_history": total - before - changed, "only_production": 0}


def watermark_ms(progress: dict[str, Any]) -> int:
    text = (progress.get("eventTime") or {}).get("watermark")
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000) if text else 0


def run_available_now(spark: Any, inbox: Path, checkpoint: Path, out: Path) -> list[dict[str, Any]]:
    raw = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(inbox))
    (query,) = start_pipeline(raw, checkpoint=str(checkpoint), parquet=str(out), available_now=True)
    await_queries([query])
    return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]


def write_lines(path: Path, readings: list[Reading]) -> None:
    path.write_bytes(b"".join(r.value() + b"\n" for r in readings))


def test_streaming_query_resumes_from_its_checkpoint(spark: Any, tmp_path: Path) -> None:
    """The streaming pipeline (watermark, append mode, Parquet sink, checkpoint) over the file source: a
    second run with the same checkpoint reads only the new input and emits each window exactly once."""
    inbox, checkpoint, out = tmp_path / "inbox", tmp_path / "checkpoint", tmp_path / "aggregates"
    inbox.mkdir()
    first, second = READINGS[:3000], READINGS[3000:]
    write_lines(inbox / "part-1.json", first[:1500])
    write_lines(inbox / "part-2.json", first[1500:])
    run1 = run_available_now(spark, inbox, checkpoint, out)
    assert sum(p["numInputRows"] for p in run1) == len(first)
    wm1 = max(watermark_ms(p) for p in run1)
    assert wm1 > START, f"the watermark never advanced: {run1}"
    want1 = reference.closed_by(reference.aggregates(first), wm1)
    assert want1, "no window closed in the first run"
    reference.assert_same(reference.from_rows(spark.read.parquet(str(out)).collect()), want1)

    write_lines(inbox / "part-3.json", second[:1500])
    write_lines(inbox / "part-4.json", second[1500:])
    run2 = run_available_now(spark, inbox, checkpoint, out)
    assert sum(p["numInputRows"] for p in run2) == len(second), "the restarted query re-read old input"
    assert min(p["batchId"] for p in run2) > max(p["batchId"] for p in run1)
    wm2 = max(watermark_ms(p) for p in run2)
    assert wm2 > wm1
    want2 = reference.closed_by(reference.aggregates(READINGS), wm2)
    assert len(want2) > len(want1)
    reference.assert_same(reference.from_rows(spark.read.parquet(str(out)).collect()), want2)
