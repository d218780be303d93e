"""Kafka transactions with the Java client (kafka-clients 3.9 and 4.x, compat_tests/java/TxnClient.java):
commit and abort at both isolation levels, zombie fencing, and consume-transform-produce with
sendOffsetsToTransaction in a consumer group (the committed group offsets and the output agree); and the
consume-transform-produce loop of test_transactions.py with compat_tests/java/TxnWorker.java as its worker,
exactly once while the worker or the server is SIGKILLed at random points."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from compat_tests.conftest import DEFAULT_PARTITIONS
from compat_tests.java_support import VERSIONS, classpath, run_main
from compat_tests.test_transactions import Worker, run_exactly_once_loop
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.timeout(300)]


@pytest.mark.parametrize("version", VERSIONS)
def test_java_transactions(server: ServerProcess, version: str) -> None:
    prefix = f"java{version.replace('.', '')}-{uuid.uuid4().hex[:6]}"
    run = run_main(version, "TxnClient", [server.bootstrap, prefix, "commit-abort", "fencing", "ctp"], timeout=240)

    check_txn_client_run(run)


def check_txn_client_run(run: Any) -> None:
    """What TxnClient's commit-abort, fencing and ctp steps must have seen (also on a cluster)."""
    committed, uncommitted = run.of("commit-abort", "read")
    assert committed["isolation"] == "read_committed"
    assert sorted(committed["values"]) == sorted(f"committed-{i}" for i in range(20))
    assert Counter(uncommitted["values"]) == Counter(
        [f"committed-{i}" for i in range(20)] + [f"aborted-{i}" for i in range(20)])

    (zombie,) = run.of("fencing", "zombie")
    assert zombie["exception"] in ("ProducerFencedException", "InvalidProducerEpochException"), zombie
    (read,) = run.of("fencing", "read")
    assert read["values"] == ["successor"]

    (moved,) = run.of("ctp", "moved")
    assert moved["count"] == 300
    assert Counter(moved["values"]) == Counter(f"R{i}" for i in range(300))  # each exactly once
    # The group's offsets committed in the transactions: one past each partition's last input record.
    assert sum(offset for offset in moved["committed"].values() if offset > 0) == 300


def java_worker(version: str) -> Worker:
    """TxnWorker on kafka-clients ``version`` (compiled once; skips the test without jars or a JDK)."""
    cp = classpath(version, "TxnWorker")

    def command(bootstrap: str, source: str, sink: str, transactional_id: str, group: str) -> list[str]:
        return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, "TxnWorker", bootstrap, source,
                sink, transactional_id, group, str(DEFAULT_PARTITIONS), "0.05"]
    return command


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_java_consume_transform_produce_exactly_once_when_the_worker_is_sigkilled(tmp_path: Any, version: str,
                                                                                   ) -> None:
    run_exactly_once_loop(tmp_path, kill_server=False, worker_command=java_worker(version))


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_java_consume_transform_produce_exactly_once_when_the_server_is_sigkilled(tmp_path: Any, version: str,
                                                                                   ) -> None:
    run_exactly_once_loop(tmp_path, kill_server=True, worker_command=java_worker(version))
