"""The pipelines' input through Millrace's native Spark connector (``format("millrace")``) instead of Spark's
Kafka source: the same readings, read by stream cuts. A Kafka topic is the stream ``kafka/<topic>``, so both
sources read the same records and the pipelines compute the same windows from either."""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from millrace.spark import MillraceDataSource


def add_source_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--source", choices=("kafka", "native"), default="kafka",
                    help="read with Spark's Kafka source (default) or Millrace's native connector")
    ap.add_argument("--endpoint", default="127.0.0.1:9090", help="Millrace's native listener (--source native)")
    ap.add_argument("--stream", default=None,
                    help="scope/stream to read with --source native (default: kafka/<--topic>, the topic's stream)")
    ap.add_argument("--start-cut", default=None,
                    help="--source native: start at this base64 StreamCut (default: the stream's head)")


def native_stream_name(args: argparse.Namespace) -> str:
    return args.stream or f"kafka/{args.topic}"


def native_options(endpoint: str, stream: str, *, start_cut: str | None = None, end_cut: str | None = None,
                   ) -> dict[str, str]:
    """The ``format("millrace")`` source options; cuts are base64 StreamCuts (``StreamCut.to_base64()``)."""
    opts = {"endpoint": endpoint, "stream": stream}
    if start_cut:
        opts["start_cut"] = start_cut
    if end_cut:
        opts["end_cut"] = end_cut
    return opts


def native_readings(spark: SparkSession, options: dict[str, str], *, streaming: bool) -> DataFrame:
    """The stream's events as the Kafka source's rows look to the pipelines: a binary ``value`` (and its
    ``key`` and ``timestamp``)."""
    spark.dataSource.register(MillraceDataSource)
    reader = spark.readStream if streaming else spark.read
    events = reader.format("millrace").options(**options).load()
    return events.select(F.col("routing_key").cast("binary").alias("key"), F.col("event").alias("value"),
                         F.col("timestamp"))
