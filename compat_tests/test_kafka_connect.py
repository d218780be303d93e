"""A Kafka Connect 4.3 distributed worker on Millrace: its config, offset and status topics are created
compacted; FileStreamSource -> topic -> FileStreamSink copies a file exactly; a worker restarted
resumes without duplicates; two workers share connectors and tasks and hand them back when one leaves."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.conftest import start_server
from compat_tests.connect_support import ConnectWorkerProcess, classpath
from tests.server_process import ServerProcess, add_scram_args, create_topic
from tests.tls_files import make_certificates

pytestmark = pytest.mark.slow  # JVM workers: about a minute for the module

STRINGS = {"key_converter": "org.apache.kafka.connect.storage.StringConverter",
           "value_converter": "org.apache.kafka.connect.storage.StringConverter"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # The cleaner runs every second, so Connect's compacted topics are compacted while it works.
    srv = start_server(str(tmp_path_factory.mktemp("connect")), "--retention-check-seconds", "1")
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def cp() -> str:
    return classpath()


def eventually(check: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def append_lines(path: Path, start: int, count: int) -> None:
    with path.open("a") as f:
        f.writelines(f"line {i} of the source file\n" for i in range(start, start + count))


def same_file(source: Path, sink: Path) -> Callable[[], bool]:
    return lambda: sink.exists() and sink.read_bytes() == source.read_bytes()


def pipeline(worker: ConnectWorkerProcess, name: str, source: Path, sink: Path, topic: str, sink_tasks: int = 1) -> None:
    worker.put(f"{name}-source", connector_class="org.apache.kafka.connect.file.FileStreamSourceConnector",
               tasks_max="1", file=str(source), topic=topic, **STRINGS)
    worker.put(f"{name}-sink", connector_class="org.apache.kafka.connect.file.FileStreamSinkConnector",
               tasks_max=str(sink_tasks), file=str(sink), topics=topic, **STRINGS)


def test_file_pipeline_copies_exactly_and_a_restarted_worker_resumes_without_duplicates(server, cp, tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource

    create_topic(server, "connect-lines", 1)
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    append_lines(source, 0, 3000)
    worker = ConnectWorkerProcess(cp, tmp_path, server.bootstrap, "127.0.0.1:18301", group="copy")
    try:
        # Connect created its internal topics compacted (it refuses to run on topics that are not).
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for topic in ("copy-configs", "copy-offsets", "copy-status"):
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            configs = admin.describe_configs([resource])[resource].result(30)
            assert configs["cleanup.policy"].value == "compact", topic
        pipeline(worker, "copy", source, sink, "connect-lines")
        eventually(same_file(source, sink), what="the sink file to equal the source file")
        status = worker.status("copy-source")
        assert status["state"] == "RUNNING" and [t["state"] for t in status["tasks"]] == ["RUNNING"]
        worker.stop()

        # Lines written while no worker runs are copied once the worker is back, and nothing twice: the
        # source resumes from its offset in copy-offsets, the sink from its group's committed offsets.
        append_lines(source, 3000, 1500)
        worker = ConnectWorkerProcess(cp, tmp_path, server.bootstrap, "127.0.0.1:18301", group="copy")
        eventually(same_file(source, sink), what="the copy to catch up after the restart")
        append_lines(source, 4500, 500)
        eventually(same_file(source, sink), what="new lines after the restart")
        lines = sink.read_text().splitlines()
        assert len(lines) == len(set(lines)) == 5000
        # The cleaner works on Connect's topics while it runs: their partitions hold fewer records than
        # their offsets span (each connector's and task's status was written again on the restart).
        eventually(lambda: compacted(server, "copy-status", 2), what="the status topic to be compacted")
    finally:
        worker.stop()


def compacted(server: ServerProcess, topic: str, partitions: int) -> bool:
    """Whether a topic holds fewer records than the offsets it has handed out, over its partitions."""
    from millrace.protocol.records import iter_batches
    from tests.kafka.wire import local

    stored = written = 0
    with local(server.kafka_port) as w:
        for p in range(partitions):
            f = w.fetch(topic, p, 0)
            written += f.high_watermark
            stored += sum(b.header.record_count for b in iter_batches(bytes(f.records or b"")))
    return stored < written


def test_two_workers_share_connectors_and_tasks_and_take_them_back(server, cp, tmp_path):
    create_topic(server, "connect-shared", 1)
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    append_lines(source, 0, 1000)
    first = ConnectWorkerProcess(cp, tmp_path, server.bootstrap, "127.0.0.1:18311", group="pair")
    second = None
    try:
        pipeline(first, "pair", source, sink, "connect-shared")
        eventually(same_file(source, sink), what="the copy with one worker")
        second = ConnectWorkerProcess(cp, tmp_path, server.bootstrap, "127.0.0.1:18312", group="pair")

        def owners() -> set[str]:
            found = set()
            for name in ("pair-source", "pair-sink"):
                s = first.status(name)
                found.add(s["worker"])
                found.update(t["worker"] for t in s["tasks"] if t["state"] == "RUNNING")
            return found

        # Incremental cooperative rebalancing gives the newcomer part of the work.
        eventually(lambda: owners() == {"127.0.0.1:18311", "127.0.0.1:18312"}, what="work on both workers")
        append_lines(source, 1000, 1000)
        eventually(same_file(source, sink), what="the copy with two workers")

        second.stop()  # its connectors and tasks come back to the first after the rebalance delay
        eventually(lambda: owners() == {"127.0.0.1:18311"}, what="work back on the first worker")
        append_lines(source, 2000, 1000)
        eventually(same_file(source, sink), what="the copy after the second worker left")
        lines = sink.read_text().splitlines()
        assert len(lines) == len(set(lines)) == 3000
    finally:
        if second is not None:
            second.stop()
        first.stop()


def test_a_worker_over_sasl_ssl_copies_a_file(cp: str, tmp_path: Path) -> None:
    """A worker configured as Connect is for a secured Kafka: the worker's own clients (its group, its
    config/offset/status topics) and the connectors' producers and consumers (``producer.``/``consumer.``
    prefixes) log in with SCRAM-SHA-512 over TLS, checking the server with a PEM trust store."""
    certificates = make_certificates(tmp_path)
    server_pem, ca_pem = certificates.server_pem, certificates.ca_pem
    properties = tmp_path / "server.properties"
    properties.write_text("listeners=SASL_SSL://127.0.0.1:0\nsasl.enabled.mechanisms=SCRAM-SHA-512\n"
                          "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security."
                          "scram.ScramLoginModule required;\n"
                          f"ssl.keystore.type=PEM\nssl.keystore.location={server_pem}\n")
    # One partition, as the other tests' topics: the sink file keeps the source's order only if the
    # records stay in order, and Connect's producer spreads null-keyed batches over partitions.
    server = start_server(str(tmp_path / "data"), "--config", str(properties), "--default-partitions", "1",
                          *add_scram_args(tmp_path, "SCRAM-SHA-512=[name=connect,password=connect-secret]"))
    security = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                    'username="connect" password="connect-secret";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_pem)}
    settings = {f"{prefix}{key}": value for prefix in ("", "producer.", "consumer.", "admin.")
                for key, value in security.items()}
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    append_lines(source, 0, 2000)
    worker = None
    try:
        worker = ConnectWorkerProcess(cp, tmp_path, f"127.0.0.1:{server.ports['kafka']}", "127.0.0.1:18321",
                                      group="secured", **settings)
        pipeline(worker, "secured", source, sink, "connect-secured")
        try:
            eventually(same_file(source, sink), what="the copy over SASL_SSL")
        except AssertionError as e:  # say where the copy stopped: a full-suite run once timed out here
            copied = len(sink.read_text().splitlines()) if sink.exists() else 0
            statuses = [worker.status(name) for name in ("secured-source", "secured-sink")]
            raise AssertionError(f"{e}: {copied} of 2000 lines copied; {statuses}\nworker log:\n"
                                 + "".join(worker.log[-80:]) + "\nserver log:\n" + "".join(server.output[-40:])) from None
        assert [t["state"] for t in worker.status("secured-sink")["tasks"]] == ["RUNNING"]
    finally:
        if worker is not None:
            worker.stop()
        server.kill()
