"""Where the end-to-end tests find Spark's Kafka connector, and why they skip when they cannot (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark import conftest

NAMES = ["spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
         "kafka-clients-3.9.0.jar", "commons-pool2-2.12.1.jar"]


def test_shared_folder_beside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_KAFKA_JARS", raising=False)
    monkeypatch.setattr(conftest, "SHARED_JARS", tmp_path)
    jars, why = conftest.connector_jars()
    assert jars == "" and "SPARK_KAFKA_JARS" in (why or "") and str(tmp_path) in (why or "")
    for name in NAMES[:3]:
        (tmp_path / name).write_bytes(b"")
    jars, why = conftest.connector_jars()
    assert jars == "" and why == f"{tmp_path} lacks commons-pool2-*.jar"
    (tmp_path / NAMES[3]).write_bytes(b"")
    jars, why = conftest.connector_jars()
    assert why is None and sorted(jars.split(",")) == sorted(str(tmp_path / n) for n in NAMES)


def test_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    present = tmp_path / "a.jar"
    present.write_bytes(b"")
    monkeypatch.setattr(conftest, "SHARED_JARS", tmp_path / "nowhere")
    monkeypatch.setenv("SPARK_KAFKA_JARS", str(present))
    assert conftest.connector_jars() == (str(present), None)
    monkeypatch.setenv("SPARK_KAFKA_JARS", f"{present},{tmp_path / 'gone.jar'}")
    jars, why = conftest.connector_jars()
    assert why == f"SPARK_KAFKA_JARS names missing files: {[str(tmp_path / 'gone.jar')]}"
