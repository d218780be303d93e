"""Spark's Kafka source and sink over a SASL_SSL listener, configured as Spark users configure any secured
Kafka: ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` and a PEM trust
store, given to the historical pipeline as ``--option`` items (its Kafka sink takes the same ``kafka.*``
settings). The aggregates match the pure-Python reference and reach the output topic; with a wrong
password the job fails with Kafka's authentication error instead of reading anything.

The certificates are made by the test (trustme); the connector jars come from SPARK_KAFKA_JARS or
../shared/spark-jars (tests/spark/conftest.py), and without them the module skips, saying so."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_examples.generate import produce
from spark_examples.readings import generate_readings
from tests.server_process import ServerProcess, add_scram_args
from tests.spark import reference
from tests.spark.conftest import connector_or_skip
from tests.spark.kafka_support import ROOT, example_command, parquet_windows, read_topic
from tests.tls_files import make_certificates

JARS = connector_or_skip()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USER, PASSWORD = "spark", "spark-secret"
READINGS = generate_readings(1500, devices=5, start_ms=1_750_000_000_000, interval_ms=200, late_fraction=0.05,
                             max_lateness_ms=20_000, seed=7)


class Secured:
    def __init__(self, server: ServerProcess, ca: Path) -> None:
        self.server, self.ca = server, ca

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.ports['kafka']}"

    def librdkafka(self) -> dict[str, Any]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                "sasl.password": PASSWORD, "ssl.ca.location": str(self.ca)}

    def spark_options(self, password: str = PASSWORD) -> list[str]:
        """The pipeline's ``--option`` items: Spark's Kafka client settings, by their Kafka names."""
        jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" '
                f'password="{password}";')
        options = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                   "kafka.sasl.jaas.config": jaas, "kafka.ssl.truststore.type": "PEM",
                   "kafka.ssl.truststore.location": str(self.ca)}
        return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("spark-secured")
    certificates = make_certificates(home)
    server_pem, ca_pem = certificates.server_pem, certificates.ca_pem
    properties = home / "server.properties"
    properties.write_text("\n".join([
        "listeners=SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram."
        "ScramLoginModule required;",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
    ]) + "\n")
    server = ServerProcess(str(home / "data"), "--config", str(properties), "--default-partitions", "3",
                           *add_scram_args(home, f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]")).start()
    try:
        yield Secured(server, ca_pem)
    finally:
        server.kill()


def _run(secured: Secured, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = example_command("spark_examples.historical_pipeline", "--bootstrap", secured.bootstrap, "--topic", topic,
                              "--show", "0", *args, jars=JARS)
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_history_over_sasl_ssl(secured: Secured, spark: Any, tmp_path: Path) -> None:
    topic, output = f"readings-{uuid.uuid4().hex[:8]}", f"aggregates-{uuid.uuid4().hex[:8]}"
    produce(secured.bootstrap, topic, READINGS, progress=False, extra_config=secured.librdkafka())
    done = _run(secured, topic, "--parquet", str(tmp_path / "history"), "--output-topic", output,
                *secured.spark_options())
    assert done.returncode == 0, (done.stderr + done.stdout)[-6000:]
    want = reference.aggregates(READINGS)
    reference.assert_same(parquet_windows(spark, tmp_path / "history"), want)
    written = read_topic(secured.bootstrap, output, secured.librdkafka())
    assert len(written) == len(want)  # one record per device window, written through the secured sink


def test_a_wrong_password_fails_the_job(secured: Secured, tmp_path: Path) -> None:
    topic = f"readings-{uuid.uuid4().hex[:8]}"
    produce(secured.bootstrap, topic, READINGS[:10], progress=False, extra_config=secured.librdkafka())
    done = _run(secured, topic, "--parquet", str(tmp_path / "never"), *secured.spark_options("wrong"))
    assert done.returncode != 0
    assert "SaslAuthenticationException" in done.stderr + done.stdout, (done.stderr + done.stdout)[-4000:]
    assert not (tmp_path / "never").exists()
