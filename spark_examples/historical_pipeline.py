"""Rewind the stream: the streaming pipeline's logic as a batch query over the topic's history.

    spark_examples/run.sh history --bootstrap 127.0.0.1:9092 --topic sensor-readings \\
        --from 2025-06-01T10:00:00Z --to 2025-06-01T11:00:00Z --parquet out/history \\
        --compare-with out/aggregates

The same stream that feeds production is the test data of the next version: spark.read.format("kafka")
between --starting-offsets/--ending-offsets (earliest, latest, or JSON per partition) or --from/--to (event
times: the records carry them as Kafka timestamps, and each partition starts at its first record at or after
--from and ends before its first record at or after --to). The result can go to Parquet, to a topic, and be
compared window by window with what the streaming pipeline wrote (--compare-with its Parquet output).
With --source native the history is read by Millrace's own connector between two stream cuts (--start-cut,
--end-cut: base64 StreamCuts, default the head and the tail), one Spark partition per segment range."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_examples.generate import parse_time_ms
from spark_examples.kafka_options import sink_options, source_options
from spark_examples.logic import aggregate, as_kafka_records
from spark_examples.native_source import (
    add_source_arguments,
    native_options,
    native_readings,
    native_stream_name,
)
from spark_examples.session import add_spark_arguments, build_session

KEY = ["device", "window_start_ms", "window_end_ms"]
VALUES = ["readings", "avg_temperature", "min_temperature", "max_temperature", "avg_humidity"]


def kafka_history(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    return spark.read.format("kafka").options(**options).load()


def historical_aggregates(raw: DataFrame, window: str = "1 minute") -> DataFrame:
    """Every window of the history, complete or not (a batch query has no watermark to wait for)."""
    return aggregate(raw, window, watermark=None)


def compare(history: DataFrame, production: DataFrame, tolerance: float = 1e-9) -> dict[str, int]:
    """Window by window: the same in both, different, only in the history (windows production had not closed,
    or that its watermark dropped), only in production (outside the history's range)."""
    h = history.select(*KEY, *[F.col(c).alias(f"h_{c}") for c in VALUES])
    p = production.select(*KEY, *[F.col(c).alias(f"p_{c}") for c in VALUES])
    joined = h.join(p, KEY, "full_outer")
    in_h = F.col("h_readings").isNotNull()
    in_p = F.col("p_readings").isNotNull()
    same = F.lit(True)
    for c in VALUES:
        same = same & (F.abs(F.col(f"h_{c}") - F.col(f"p_{c}")) <= F.lit(tolerance))
    row = joined.agg(
        F.sum(F.when(in_h & in_p & same, 1).otherwise(0)).alias("same"),
        F.sum(F.when(in_h & in_p & ~same, 1).otherwise(0)).alias("different"),
        F.sum(F.when(in_h & ~in_p, 1).otherwise(0)).alias("only_history"),
        F.sum(F.when(~in_h & in_p, 1).otherwise(0)).alias("only_production"),
    ).first()
    return {k: int(v or 0) for k, v in row.asDict().items()} if row is not None else {}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spark_examples/run.sh history", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="Millrace's Kafka listener (host:port)")
    ap.add_argument("--topic", default="sensor-readings")
    ap.add_argument("--starting-offsets", default="earliest", help='earliest or JSON {"topic":{"0":12,"1":-2}}')
    ap.add_argument("--ending-offsets", default="latest", help='latest or JSON {"topic":{"0":99,"1":-1}}')
    ap.add_argument("--from", dest="from_", default=None, help="start at this event time (epoch ms or ISO-8601)")
    ap.add_argument("--to", default=None, help="end before this event time (epoch ms or ISO-8601)")
    ap.add_argument("--window", default="1 minute")
    ap.add_argument("--parquet", default=None, help="write the aggregates here (overwrites)")
    ap.add_argument("--output-topic", default=None, help="also write the aggregates to this topic")
    ap.add_argument("--compare-with", default=None, help="Parquet output of the streaming pipeline")
    ap.add_argument("--show", type=int, default=20, help="print this many aggregate rows")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="any other Kafka source option (kafka.* for client settings)")
    add_source_arguments(ap)
    ap.add_argument("--end-cut", default=None,
                    help="--source native: end at this base64 StreamCut (default: the stream's tail)")
    add_spark_arguments(ap)
    args = ap.parse_args(argv)
    kafka_only = (args.from_, args.to, args.starting_offsets != "earliest", args.ending_offsets != "latest")
    if args.source == "native" and any(kafka_only):
        ap.error("--from, --to, --starting-offsets and --ending-offsets are Kafka source options "
                 "(--start-cut and --end-cut for native)")

    if args.source == "native" and not args.output_topic and args.packages is None:
        args.packages = "none"  # no Kafka source or sink: Spark's Kafka connector is not needed
    spark = build_session("millrace-sensors-history", args)
    extra = dict(item.split("=", 1) for item in args.option)
    if args.source == "native":
        name = native_stream_name(args)
        raw = native_readings(spark, native_options(args.endpoint, name, start_cut=args.start_cut,
                                                    end_cut=args.end_cut), streaming=False)
    else:
        name = args.topic
        raw = kafka_history(spark, source_options(
            args.bootstrap, args.topic, starting_offsets=args.starting_offsets, ending_offsets=args.ending_offsets,
            starting_timestamp=parse_time_ms(args.from_) if args.from_ else None,
            ending_timestamp=parse_time_ms(args.to) if args.to else None, extra=extra))
    result = historical_aggregates(raw, args.window).cache()
    windows = result.count()
    print(f"{windows} device windows from {name}", file=sys.stderr)
    if args.show:
        result.orderBy("window_start_ms", "device").show(args.show, truncate=False)
    if args.parquet:
        result.write.mode("overwrite").parquet(args.parquet)
    if args.output_topic:
        (as_kafka_records(result).write.format("kafka").options(**sink_options(args.bootstrap, extra))
         .option("topic", args.output_topic).save())
    if args.compare_with:
        diff = compare(result, spark.read.parquet(args.compare_with))
        print("compared with production: " + ", ".join(f"{k} {v}" for k, v in diff.items()))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
