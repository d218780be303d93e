"""A SparkSession with Spark's Kafka connector attached, and the command-line options every example shares."""

from __future__ import annotations

import argparse
import os
import sys

import pyspark
from pyspark.sql import SparkSession


def connector_package() -> str:
    """The connector's Maven coordinate for the installed PySpark (Scala 2.13 builds, as PySpark 4 ships)."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def add_spark_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--master", default=None,
                    help="Spark master (default local[*]; under spark-submit, whatever it was given)")
    ap.add_argument("--jars", default=None,
                    help="comma-separated connector jars for spark.jars (default: $SPARK_KAFKA_JARS); "
                         "when set, nothing is downloaded")
    ap.add_argument("--packages", default=None,
                    help=f"Maven coordinates for spark.jars.packages (default {connector_package()}; "
                         "'none' when spark-submit --packages already attached it)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="any Spark setting")
    ap.add_argument("--shuffle-partitions", type=int, default=4,
                    help="spark.sql.shuffle.partitions (state store partitions of the streaming query)")


def build_session(app: str, args: argparse.Namespace) -> SparkSession:
    builder = SparkSession.builder.appName(app)
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    jars = args.jars or os.environ.get("SPARK_KAFKA_JARS")
    if jars:
        builder = builder.config("spark.jars", jars)
    elif (args.packages or "") != "none":
        builder = builder.config("spark.jars.packages", args.packages or connector_package())
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Python data sources (--source native) plan and read in Python workers: this interpreter, which
        # has millrace and pyspark, rather than Spark's default python3 from the PATH (the planner's workers
        # follow PYSPARK_PYTHON, not spark.pyspark.python). Under spark-submit, its settings rule.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (builder.config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
               .config("spark.ui.showConsoleProgress", "false"))
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark
