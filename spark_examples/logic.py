"""The pipelines' transformation, shared by the streaming and the historical pipeline and tested without the
Kafka connector: a function over any DataFrame with a ``value`` column holding a reading as JSON (Kafka's
source gives binary ``value``; the text file source gives a string one)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

READING_SCHEMA = StructType([
    StructField("device", StringType()),
    StructField("ts_ms", LongType()),
    StructField("temperature", DoubleType()),
    StructField("humidity", DoubleType()),
    StructField("seq", LongType()),
])

AGGREGATE_COLUMNS = ["device", "window_start_ms", "window_end_ms", "readings", "avg_temperature",
                     "min_temperature", "max_temperature", "avg_humidity"]


def parse_readings(raw: DataFrame) -> DataFrame:
    """JSON ``value`` -> one row per reading with an ``event_time`` timestamp. Malformed values and readings
    without a device or event time are dropped."""
    parsed = raw.select(F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r"))
    return (parsed.select("r.*")
            .where(F.col("device").isNotNull() & F.col("ts_ms").isNotNull())
            .withColumn("event_time", F.timestamp_millis(F.col("ts_ms"))))


def window_aggregates(readings: DataFrame, window: str = "1 minute", watermark: str | None = "2 minutes",
                      ) -> DataFrame:
    """Per device and tumbling event-time window: count, average/min/max temperature, average humidity.
    With ``watermark`` (streaming), a window is final once the watermark passes its end and readings older
    than the watermark are dropped; in a batch query the watermark changes nothing."""
    if watermark:
        readings = readings.withWatermark("event_time", watermark)
    w = F.window(F.col("event_time"), window)
    agg = readings.groupBy(w.alias("window"), F.col("device")).agg(
        F.count(F.lit(1)).alias("readings"),
        F.avg("temperature").alias("avg_temperature"),
        F.min("temperature").alias("min_temperature"),
        F.max("temperature").alias("max_temperature"),
        F.avg("humidity").alias("avg_humidity"),
    )
    return agg.select(
        F.col("device"),
        F.unix_millis(F.col("window.start")).alias("window_start_ms"),
        F.unix_millis(F.col("window.end")).alias("window_end_ms"),
        *[F.col(c) for c in AGGREGATE_COLUMNS[3:]],
    )


def aggregate(raw: DataFrame, window: str = "1 minute", watermark: str | None = "2 minutes") -> DataFrame:
    """The whole transformation: raw JSON values -> window aggregates."""
    return window_aggregates(parse_readings(raw), window, watermark)


def as_kafka_records(aggregates: DataFrame) -> DataFrame:
    """``key`` (device) and ``value`` (the aggregate as JSON) for Spark's Kafka sink."""
    value: Column = F.to_json(F.struct(*[F.col(c) for c in AGGREGATE_COLUMNS]))
    return aggregates.select(F.col("device").alias("key"), value.alias("value"))
