"""Native transactions on a cluster made by ``millrace cluster up`` (ZooKeeper, 3 logd, 3 nodes): one node
serves them (the owner of their table's container), the others forward to it, and a commit lands each
partition's batches on that partition's leader, wherever it runs. Checked with a Kafka consumer, which
reads every partition from its leader: every committed event once, in key order, no aborted one; and
across a SIGKILL of the node serving the transactions, with transactions open and committing."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millrace import StreamManager, StringSerializer, Transaction, TxnStatus
from millrace.client.transactions import TransactionalEventStreamWriter
from millrace.gateway.commands.local_cluster import zookeeper_missing
from millrace.protocol.errors import StreamNotFoundError
from millrace.store.controller.transactions import NATIVE_TXNS_TABLE
from millrace.store.segment_store import container_index
from tests.client.test_transactions import merge_writer_attributes
from tests.cluster.faults import read_partitions
from tests.cluster.local_cluster import LocalClusterCli
from tests.cluster.test_local_cluster import CONTAINERS, all_owned, create_topic, wait_status

pytestmark = [pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing())),
              pytest.mark.timeout(300)]

PARTITIONS = 6
KEYS = [f"k{n}" for n in range(12)]


def new_cluster(tmp_path: Path) -> LocalClusterCli:
    return LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--log-replicas", "3", "--containers",
                           str(CONTAINERS), "--session-timeout", "3")


def endpoints(cluster: LocalClusterCli) -> dict[str, str]:
    """Node id -> its native endpoint (``cluster up`` lists them in node order)."""
    return {str(i + 1): endpoint for i, endpoint in enumerate(cluster.summary["native"])}


def transactions_node(status: dict[str, Any]) -> str:
    """The id of the node that owns the native transactions' table's container."""
    container = container_index(NATIVE_TXNS_TABLE, CONTAINERS)
    return str(next(c["owner"] for c in status["containers"] if c["id"] == container))


def begin(writer: TransactionalEventStreamWriter[str]) -> Transaction[str]:
    """A new transaction; a node learns of a topic made through another node within a second (its
    topics-table refresh), and until then answers StreamNotFoundError."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return writer.begin_txn()
        except StreamNotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def write(txn: Transaction[str], tag: str, count: int) -> list[str]:
    values = [f"{tag}:{i}" for i in range(count)]
    for i, value in enumerate(values):
        txn.write_event(value, routing_key=KEYS[i % len(KEYS)])
    txn.flush()
    return values


def stored_values(cluster: LocalClusterCli, topic: str) -> list[str]:
    read = read_partitions(cluster.bootstrap, topic, PARTITIONS, timeout=60)
    return [value.decode() for p in range(PARTITIONS) for _, value in sorted(read[p])]


def in_key_order(stored: list[str], tag: str) -> bool:
    numbers = [int(v.split(":")[1]) for v in stored if v.split(":")[0] == tag]
    return all([n for n in numbers if n % len(KEYS) == k] == sorted(n for n in numbers if n % len(KEYS) == k)
               for k in range(len(KEYS)))


def test_commits_through_every_node_land_on_every_partitions_leader(tmp_path: Path) -> None:
    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "ntxn", PARTITIONS)
        status = wait_status(cluster, all_owned, "every container owned")
        assert len({c["owner"] for c in status["containers"]}) > 1, "one node leads everything: nothing to test"
        committed: list[str] = []
        for node, endpoint in endpoints(cluster).items():  # the transactions' node and two that forward
            with StreamManager(endpoint, timeout=30.0) as sm:
                writer = sm.create_transaction_writer("kafka", "ntxn", serializer=StringSerializer())
                kept, dropped = begin(writer), begin(writer)
                committed += write(kept, f"c{node}", 240)
                write(dropped, f"a{node}", 60)
                dropped.abort()
                kept.commit()
                assert kept.check_status() == TxnStatus.COMMITTED
                assert dropped.check_status() == TxnStatus.ABORTED
        # Every leader forgets the merge writers' numbers once their transactions committed.
        with StreamManager(endpoints(cluster)["1"], timeout=30.0) as sm:
            deadline = time.monotonic() + 20
            while (left := merge_writer_attributes(sm, "kafka", "ntxn")) != []:
                assert time.monotonic() < deadline, f"merge writers' numbers kept: {left}"
                time.sleep(0.2)
        stored = stored_values(cluster, "ntxn")
        counts = Counter(stored)
        print(f"committed {len(committed)}, stored {len(stored)}, transactions' node "
              f"{transactions_node(status)}, owners {[c['owner'] for c in status['containers']]}")
        assert sorted(v for v in stored if v.startswith("c")) == sorted(committed)
        assert not [v for v in stored if v.startswith("a")]
        assert max(counts.values()) == 1
        assert all(in_key_order(stored, f"c{node}") for node in endpoints(cluster))


def test_transactions_carry_on_after_a_sigkill_of_their_node(tmp_path: Path) -> None:
    """The node serving the transactions is SIGKILLed with one transaction committed, one open with events
    and one whose commit was asked: through a surviving node, the open one is written on and committed,
    and every committed event is there once."""
    with new_cluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "ntxnkill", PARTITIONS)
        status = wait_status(cluster, all_owned, "every container owned")
        victim = transactions_node(status)
        survivor = next(node for node in endpoints(cluster) if node != victim)
        with StreamManager(endpoints(cluster)[survivor], timeout=30.0, reconnect_timeout=120.0) as sm:
            writer = sm.create_transaction_writer("kafka", "ntxnkill", serializer=StringSerializer(),
                                                  lease_ms=60_000)
            before, open_, last = begin(writer), begin(writer), begin(writer)
            expected = write(before, "before", 200)
            before.commit()
            expected += write(open_, "open", 150)
            expected += write(last, "last", 150)
            cluster.kill(f"node-{victim}", signal.SIGKILL)
            last.commit()  # forwarded to the new transactions' node once the table's container moved
            expected += write(open_, "more", 150)
            open_.commit()
            assert [t.check_status() for t in (before, open_, last)] == [TxnStatus.COMMITTED] * 3
            after = writer.begin_txn()
            expected += write(after, "after", 100)
            after.commit()
        stored = stored_values(cluster, "ntxnkill")
        counts = Counter(stored)
        print(f"committed {len(expected)}, stored {len(stored)}, duplicated "
              f"{sum(1 for n in counts.values() if n > 1)}, lost {len(set(expected) - set(stored))}")
        assert sorted(stored) == sorted(expected)
        assert all(in_key_order(stored, tag) for tag in ("before", "open", "last", "more", "after"))
