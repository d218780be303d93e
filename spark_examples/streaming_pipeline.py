"""The production pipeline: Spark structured streaming over a Millrace topic with Spark's built-in Kafka source.

    spark_examples/run.sh stream --bootstrap 127.0.0.1:9092 --topic sensor-readings \\
        --output-topic sensor-aggregates --parquet out/aggregates --checkpoint out/checkpoint

readStream.format("kafka") (or, with --source native, Millrace's own format("millrace") over the topic's stream
kafka/<topic> or any --stream) -> parse JSON -> per-device tumbling event-time windows with a watermark ->
two queries with their own checkpoints under --checkpoint: the Kafka sink into --output-topic (key = device,
value = the aggregate as JSON) and the Parquet file sink into --parquet (exactly-once). Output mode is append:
a window is written once, when the watermark passes its end. Stopped (Ctrl-C) and started again with the
same --checkpoint, each query resumes at the offsets it had reached; --starting-offsets applies only to a
new checkpoint. --available-now processes what the topic holds and stops (a catch-up run)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from spark_examples.kafka_options import sink_options, source_options
from spark_examples.logic import aggregate, as_kafka_records
from spark_examples.native_source import (
    add_source_arguments,
    native_options,
    native_readings,
    native_stream_name,
)
from spark_examples.session import add_spark_arguments, build_session


def kafka_stream(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    return spark.readStream.format("kafka").options(**options).load()


def start_pipeline(raw: DataFrame, *, checkpoint: str, parquet: str | None, bootstrap: str | None = None,
                   output_topic: str | None = None, window: str = "1 minute", watermark: str = "2 minutes",
                   available_now: bool = False, trigger_seconds: float = 10.0, name: str = "sensors",
                   client_options: dict[str, str] | None = None) -> list[StreamingQuery]:
    """Starts the sink queries over ``raw`` (any streaming DataFrame with a JSON ``value`` column);
    ``client_options``: the source's ``kafka.*`` settings, which the Kafka sink uses too."""
    if not parquet and not output_topic:
        raise ValueError("nothing to write: give a Parquet path, an output topic or both")
    aggregates = aggregate(raw, window, watermark)
    trigger = {"availableNow": True} if available_now else {"processingTime": f"{trigger_seconds} seconds"}
    queries: list[StreamingQuery] = []
    if output_topic:
        if not bootstrap:
            raise ValueError("the Kafka sink needs bootstrap servers")
        queries.append(
            as_kafka_records(aggregates).writeStream.queryName(f"{name}-kafka").format("kafka")
            .options(**sink_options(bootstrap, client_options)).option("topic", output_topic)
            .option("checkpointLocation", f"{checkpoint}/kafka-sink")
            .outputMode("append").trigger(**trigger).start())
    if parquet:
        queries.append(
            aggregates.writeStream.queryName(f"{name}-parquet").format("parquet").option("path", parquet)
            .option("checkpointLocation", f"{checkpoint}/parquet-sink")
            .outputMode("append").trigger(**trigger).start())
    return queries


class StopRequest:
    """Ctrl-C (SIGINT) and SIGTERM ask the main thread to stop the queries, which it notices between short
    waits. PySpark's own SIGINT handler calls into the JVM from inside the handler, re-entering the py4j read
    the main thread is blocked in ("RuntimeError: reentrant call", then py4j tracebacks and exit status 1), so
    this one only sets a flag. A second signal while stopping aborts at once."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def install(self) -> None:
        """Replaces the handlers (after the SparkSession exists: creating it installs PySpark's)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        self.signal_name = signal.Signals(signum).name  # no I/O here: the main thread may be mid-write


def stop_gracefully(query: StreamingQuery, timeout_s: float = 120.0) -> None:
    """Stops ``query`` between micro-batches. Stopping one mid-batch is safe for its checkpoint, but the
    Kafka sink is at-least-once: records the interrupted batch had already sent would be sent again when the
    batch reruns on restart. So a running batch is let finish first."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)
    if query.isActive:
        query.stop()


def await_queries(queries: list[StreamingQuery], stop: StopRequest | None = None, poll_s: float = 0.5) -> None:
    """Waits until every query has ended, one has failed, or ``stop`` is requested; then stops the others
    between batches (their checkpoints stay consistent). Raises RuntimeError when a query failed."""
    try:
        while not (stop is not None and stop.requested):
            active = [q for q in queries if q.isActive]
            if not active or any(q.exception() is not None for q in queries):
                break
            try:
                active[0].awaitTermination(poll_s)
            except StreamingQueryException:
                break  # reported below, after the others are stopped
    finally:
        if stop is not None and stop.requested:
            print(f"{stop.signal_name}: stopping after the running batch (again to abort)...", file=sys.stderr)
        for q in queries:
            stop_gracefully(q)
    failed = [f"query {q.name} failed: {q.exception()}" for q in queries if q.exception() is not None]
    if failed:
        raise RuntimeError("; ".join(failed))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spark_examples/run.sh stream", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="Millrace's Kafka listener (host:port)")
    ap.add_argument("--topic", default="sensor-readings", help="the readings topic")
    ap.add_argument("--output-topic", default="sensor-aggregates", help="'' for no Kafka output")
    ap.add_argument("--parquet", default="spark-out/aggregates", help="'' for no Parquet output")
    ap.add_argument("--checkpoint", default="spark-out/checkpoint")
    ap.add_argument("--window", default="1 minute")
    ap.add_argument("--watermark", default="2 minutes", help="how late a reading may be and still count")
    ap.add_argument("--starting-offsets", default="earliest", help="earliest, latest or JSON (new checkpoint only)")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None)
    ap.add_argument("--trigger-seconds", type=float, default=10.0)
    ap.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="any other Kafka source option (kafka.* for client settings)")
    add_source_arguments(ap)
    add_spark_arguments(ap)
    args = ap.parse_args(argv)
    if args.source == "native" and (args.max_offsets_per_trigger is not None or args.starting_offsets != "earliest"):
        ap.error("--max-offsets-per-trigger and --starting-offsets are Kafka source options (--start-cut for native)")

    stop = StopRequest()
    stop.install()  # a Ctrl-C while the JVM starts is remembered, not a traceback
    if args.source == "native" and not args.output_topic and args.packages is None:
        args.packages = "none"  # no Kafka source or sink: Spark's Kafka connector is not needed
    spark = build_session("millrace-sensors-streaming", args)
    stop.install()  # again: creating the SparkContext installed PySpark's handler over ours
    extra = dict(item.split("=", 1) for item in args.option)
    if args.source == "native":
        raw = native_readings(spark, native_options(args.endpoint, native_stream_name(args), start_cut=args.start_cut),
                              streaming=True)
    else:
        raw = kafka_stream(spark, source_options(args.bootstrap, args.topic, starting_offsets=args.starting_offsets,
                                                 max_offsets_per_trigger=args.max_offsets_per_trigger, extra=extra))
    # Spark 4.0 has no Trigger.AvailableNow for Python data sources: it falls back to a single batch, which
    # never runs the next one that lets the watermark close windows. So a native catch-up run polls every
    # second until everything there is processed (watermark batches included), then stops.
    catch_up = args.source == "native" and args.available_now
    queries = start_pipeline(raw, checkpoint=args.checkpoint, parquet=args.parquet or None,
                             bootstrap=args.bootstrap, output_topic=args.output_topic or None,
                             window=args.window, watermark=args.watermark,
                             available_now=args.available_now and not catch_up,
                             trigger_seconds=1.0 if catch_up else args.trigger_seconds, client_options=extra)
    print(f"started {', '.join(q.name for q in queries)}; checkpoint {args.checkpoint}", file=sys.stderr)
    if catch_up:
        for q in queries:
            q.processAllAvailable()
        for q in queries:
            stop_gracefully(q)
    await_queries(queries, stop)
    for q in queries:
        progress = q.lastProgress or {}
        print(f"{q.name}: last batch {progress.get('batchId')}, watermark "
              f"{(progress.get('eventTime') or {}).get('watermark')}", file=sys.stderr)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
