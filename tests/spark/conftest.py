"""One local[2] SparkSession for the whole tests/spark package (a JVM start costs tens of seconds on two
cores). Tests that need it skip, saying why, when PySpark or Java is missing."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from typing import Any

import pytest


def pyspark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return ("pyspark is not installed: `.venv/bin/pip install -e '.[spark]'` (scripts/bootstrap.sh installs "
                "it unless MILLRACE_NO_SPARK=1)")
    if shutil.which("java") is None:
        return "Spark needs Java 17 (scripts/bootstrap.sh installs openjdk-17-jdk-headless)"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    why = pyspark_missing()
    if why:
        pytest.skip(why)
    from pyspark.sql import SparkSession

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
