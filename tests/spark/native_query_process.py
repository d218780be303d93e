"""A Spark driver of its own (its own JVM) for the native connector's crash test: a streaming query that
copies a native stream into another through the transactional sink, checkpointed, each row slowed down
a little in a Python UDF so that batches take a while (a kill then lands inside one).

    python -m tests.spark.native_query_process ENDPOINT SOURCE SINK SINK_ID CHECKPOINT

Prints ``jvm <pid>`` once the query runs (the pid of the JVM the driver started, for the test to
SIGKILL). A line ``stop`` on standard input processes everything available, stops the query and exits 0."""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from millrace.spark import MillraceDataSource

ROW_PAUSE_S = 0.02  # per row: a batch of a few dozen rows stays in its tasks for a good part of a second


def slowly(key: str | None) -> str | None:
    time.sleep(ROW_PAUSE_S)
    return key


def main(argv: list[str]) -> int:
    endpoint, source, sink, sink_id, checkpoint = argv
    # The Python workers (the source's reads, the sink's writes, the UDF) must import millrace: this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("millrace-crash-test")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MillraceDataSource)
    paced = F.udf(slowly, StringType())
    events = spark.readStream.format("millrace").option("endpoint", endpoint).option("stream", source).load()
    query = (events.select(paced("routing_key").alias("routing_key"), "event").writeStream.format("millrace")
             .option("endpoint", endpoint).option("stream", sink).option("sink_id", sink_id)
             .option("checkpointLocation", checkpoint).trigger(processingTime="500 milliseconds").start())
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    print(f"jvm {jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    query.processAllAvailable()
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
