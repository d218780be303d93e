"""One local[2] SparkSession for the whole tests/spark package (a JVM start costs tens of seconds on two
cores). Tests that need it skip, saying why, when PySpark or Java is missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Beside the repository in CI and on development machines (a fresh clone at <somewhere>/main, shared/ next to it).
SHARED_JARS = ROOT.parent / "shared" / "spark-jars"
CONNECTOR_JARS = ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-", "kafka-clients-",
                  "commons-pool2-")


def pyspark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return ("pyspark is not installed: `.venv/bin/pip install -e '.[spark]'` (scripts/bootstrap.sh installs "
                "it unless MILLRACE_NO_SPARK=1)")
    if shutil.which("java") is None:
        return "Spark needs Java 17 (scripts/bootstrap.sh installs openjdk-17-jdk-headless)"
    return None


def connector_jars() -> tuple[str, str | None]:
    """Spark's Kafka connector as a comma-separated jar list for ``spark.jars``, and why not when it cannot be
    found: ``SPARK_KAFKA_JARS`` when set, else every jar in ``<repo>/../shared/spark-jars``."""
    named = os.environ.get("SPARK_KAFKA_JARS", "")
    if named:
        jars = [p for p in named.split(",") if p]
        missing = [p for p in jars if not Path(p).is_file()]
        return named, (f"SPARK_KAFKA_JARS names missing files: {missing}" if missing else None)
    found = sorted(str(p) for p in SHARED_JARS.glob("*.jar"))
    if not found:
        return "", (f"Spark's Kafka connector is not here: set SPARK_KAFKA_JARS (comma-separated paths of "
                    f"spark-sql-kafka-0-10_2.13, spark-token-provider-kafka-0-10_2.13, kafka-clients 3.9, "
                    f"commons-pool2) or put the jars in {SHARED_JARS}")
    absent = [prefix for prefix in CONNECTOR_JARS if not any(Path(p).name.startswith(prefix) for p in found)]
    if absent:
        return "", f"{SHARED_JARS} lacks {', '.join(a + '*.jar' for a in absent)}"
    return ",".join(found), None


def connector_or_skip() -> str:
    """The connector jars for an end-to-end module; skips the module, saying why, without them or PySpark."""
    why = pyspark_missing()
    if why:
        pytest.skip(why, allow_module_level=True)
    jars, why = connector_jars()
    if why:
        pytest.skip(why, allow_module_level=True)
    return jars


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    why = pyspark_missing()
    if why:
        pytest.skip(why)
    from pyspark.sql import SparkSession

    # Python data sources (format("millrace")) plan and read in Python workers, which must be this
    # interpreter, whose environment has millrace and pyspark: Spark's default is python3 from the PATH,
    # and its planner workers follow PYSPARK_PYTHON, not spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("millrace-spark-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
