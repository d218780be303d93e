"""KIP-848 consumer groups (``group.protocol=consumer``) on a cluster made by ``millrace cluster up``: the
group lives in the group coordinator (the owner of the groups table's container), whose node is SIGKILLed
while two librdkafka members consume under a producer; another node takes the table over, reloads the
group, and the members carry on from their positions: no record is missed, and a record is seen twice
only where its synchronous commit had not completed when the coordinator died (at most one per
partition), as on a single server. (It found OffsetForLeaderEpoch answering a new leader's stale copy:
the members then re-read whole partitions.)"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat_tests.test_consumer_group_protocol import (
    BackgroundProducer,
    RdMember,
    librdkafka_supports_consumer_protocol,
)
from millrace.gateway.commands.local_cluster import zookeeper_missing
from millrace.gateway.kafka.group_store import GROUPS_TABLE
from millrace.store.segment_store import container_index
from tests.cluster.local_cluster import LocalClusterCli
from tests.cluster.test_local_cluster import CONTAINERS, all_owned, create_topic, wait_status

pytestmark = [pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing())),
              pytest.mark.skipif(not librdkafka_supports_consumer_protocol(), reason="librdkafka older than 2.6"),
              pytest.mark.timeout(300)]

PARTITIONS = 6


@dataclass
class Bootstrap:
    """What the compat helpers read of a server: its bootstrap list."""

    bootstrap: str


def wait_until(what: str, check: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def test_a_consumer_protocol_group_carries_on_across_a_sigkill_of_its_coordinator(tmp_path: Path) -> None:
    with LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--log-replicas", "3", "--containers",
                         str(CONTAINERS), "--session-timeout", "3") as cluster:
        create_topic(cluster.bootstrap, "kip848", PARTITIONS)
        status = wait_status(cluster, all_owned, "every container owned")
        groups_container = container_index(GROUPS_TABLE, CONTAINERS)
        coordinator = next(c["owner"] for c in status["containers"] if c["id"] == groups_container)
        server = Bootstrap(cluster.bootstrap)
        consumed: list[tuple[str, int, int]] = []
        lock = threading.Lock()
        group = f"kip848-{uuid.uuid4().hex[:8]}"
        members: list[RdMember] = []
        try:
            with BackgroundProducer(server, "kip848", 300, rate=1000) as before:  # type: ignore[arg-type]
                pass
            members = [RdMember(server, n, "kip848", group, "uniform", consumed, lock)  # type: ignore[arg-type]
                       for n in ("a", "b")]
            wait_until("the first 300 records consumed", lambda: len({(p, o) for _, p, o in consumed}) >= 300)
            cluster.kill(f"node-{coordinator}", signal.SIGKILL)
            with BackgroundProducer(server, "kip848", 300, rate=200) as after:  # type: ignore[arg-type]
                pass
            wait_until("every record consumed", lambda: len({(p, o) for _, p, o in consumed}) >= 600, timeout=120)
            assert all(m.thread.is_alive() for m in members), {m.name: m.errors for m in members}
        finally:
            for m in members:
                m.close()
        counts = Counter((p, o) for _, p, o in consumed)
        missing = (set(before.placed) | set(after.placed)) - set(counts)
        twice = Counter(p for (p, _), c in counts.items() if c > 1)
        by_member = Counter(name for name, _, _ in consumed)
        print(f"coordinator node-{coordinator} killed; produced {len(before.placed) + len(after.placed)}, "
              f"consumed {len(consumed)} ({dict(by_member)}), missing {len(missing)}, seen twice {sum(twice.values())}")
        for m in members:
            print(f"  member {m.name}: {len(m.errors)} errors {m.errors[:3]}")
        assert not before.errors and not after.errors, before.errors + after.errors
        assert not missing, sorted(missing)[:10]
        assert all(c <= 1 for c in twice.values()), twice
