"""The Java kafka-clients (3.9 and 4.x), unmodified, against a real Millrace server: the producer with
default settings (idempotent) and every codec, a consumer with assign/seek/poll and no group, a consumer
group that commits and resumes, and the Admin calls Spark's Kafka source makes.

compat_tests/java/CompatClient.java is compiled with javac at test time against each client version's
jars (fetched by compat_tests/java/fetch_jars.sh into .cache/kafka-jars/) and run once per version with
every scenario, because a JVM start is slow; it prints JSON lines that the tests here check."""

from __future__ import annotations

import uuid

import pytest

from compat_tests.common import (
    CODECS,
    Placed,
    Rec,
    check_consumed,
    expect_dense,
    placed_count,
    records_to_lines,
    sample_records,
)
from compat_tests.java_support import VERSIONS, JavaRun, placed, run_java
from tests.server_process import ServerProcess

RUN_TIMEOUT = 240.0
BULK = 20000

pytestmark = pytest.mark.timeout(int(RUN_TIMEOUT) + 60)

RECORDS = sample_records("java", count=24, null_header_values=True)
GROUP_RECORDS = sample_records("java-group", count=30, big=0)


@pytest.fixture(scope="module", params=VERSIONS)
def java(request: pytest.FixtureRequest, server: ServerProcess, tmp_path_factory: pytest.TempPathFactory,
         ) -> JavaRun:
    version: str = request.param
    work = tmp_path_factory.mktemp(f"java-{version}")
    (work / "records.tsv").write_text(records_to_lines(RECORDS))
    (work / "group.tsv").write_text(records_to_lines(GROUP_RECORDS))
    prefix = f"java{version.replace('.', '')}-{uuid.uuid4().hex[:8]}"
    scenarios = [f"roundtrip:{c}" for c in CODECS] + [f"bulk:{BULK}", "group", "admin", "admin_groups"]
    return run_java(version, server.bootstrap, work, prefix, scenarios, RUN_TIMEOUT)


def produced(run: JavaRun, scenario: str, recs: list[Rec]) -> dict[int, list[Placed]]:
    reports = sorted(run.of(scenario, "produced"), key=lambda e: e["i"])
    return expect_dense(recs, [(e["partition"], e["offset"]) for e in reports])


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_default_producer_and_groupless_consumer(java: JavaRun, codec: str) -> None:
    scenario = f"roundtrip:{codec}"
    expected = produced(java, scenario, RECORDS)
    check_consumed(expected, [placed(e) for e in java.of(scenario, "consumed")])
    # seek(partition 0, 2) then poll: exactly the rest of partition 0.
    (seek,) = java.of(scenario, "seek")
    assert seek["end"] == len(expected.get(0, []))
    reread = [placed(e) for e in java.of(scenario, "reread")]
    check_consumed({0: expected.get(0, [])}, reread, start={0: seek["offset"]})


def test_bulk_pipelined_idempotent_producer(java: JavaRun) -> None:
    """20000 records through the default producer (idempotent, acks=all, up to 5 requests in flight per
    connection): offsets dense per partition in send order, and read back exactly."""
    scenario = f"bulk:{BULK}"
    (config,) = java.of(scenario, "producer_config")
    assert config["idempotence"] is True and config["acks"] in ("all", "-1"), config
    (produced_all,) = java.of(scenario, "produced_all")
    sent: dict[int, list[tuple[int, int]]] = {}
    for i, (p, o) in enumerate(zip(produced_all["partitions"], produced_all["offsets"], strict=True)):
        sent.setdefault(p, []).append((o, i))
    for p, pairs in sent.items():
        assert [o for o, _ in pairs] == list(range(len(pairs))), f"partition {p}: offsets not dense in send order"
    (consumed_all,) = java.of(scenario, "consumed_all")
    got: dict[int, list[tuple[int, int]]] = {}
    for p, o, i in zip(consumed_all["partitions"], consumed_all["offsets"], consumed_all["indexes"], strict=True):
        got.setdefault(p, []).append((o, i))
    assert sum(len(v) for v in got.values()) == BULK
    assert got == sent


def test_group_commit_and_resume(java: JavaRun) -> None:
    expected = produced(java, "group", GROUP_RECORDS)
    first = [placed(e) for e in java.of("group", "first")]
    assert first, "the first group member received nothing"
    committed = {e["partition"]: e["offset"] for e in java.of("group", "committed")}
    for partition in expected:
        mine = [p.offset for p in first if p.partition == partition]
        assert mine == list(range(len(mine))), (partition, mine)
        if mine:
            assert committed.get(partition) == len(mine), (partition, committed)
    start = {p: o for p, o in committed.items() if o >= 0}
    second = [placed(e) for e in java.of("group", "second")]
    assert len(second) == placed_count(expected, start)
    check_consumed(expected, second, start=start)


def test_admin_calls_spark_makes(java: JavaRun) -> None:
    (described,) = java.of("admin", "described")
    assert described["partitions"] == [0, 1, 2, 3, 4]
    assert all(leader >= 0 for leader in described["leaders"]), described
    (base,) = java.of("admin", "base_ts")
    ts0 = base["ts"]
    prod = java.of("admin", "produced")
    assert [(e["partition"], e["offset"], e["ts"]) for e in prod] == [(1, i, ts0 + i * 1000) for i in range(6)]
    offsets = {(e["spec"], e["partition"]): (e["offset"], e["timestamp"]) for e in java.of("admin", "offsets")}
    assert offsets[("earliest", 0)][0] == 0 and offsets[("earliest", 1)][0] == 0, offsets
    assert offsets[("latest", 0)][0] == 0 and offsets[("latest", 1)][0] == 6, offsets
    assert offsets[("ts", 1)] == (3, ts0 + 3000), offsets
    assert offsets[("ts_after_all", 1)][0] == -1, offsets
    assert offsets[("max_ts", 1)] == (5, ts0 + 5000), offsets
    by_consumer = {(e["spec"], e["partition"]): e for e in java.of("admin", "consumer_offsets")}
    assert by_consumer[("beginning", 0)]["offset"] == 0 and by_consumer[("beginning", 1)]["offset"] == 0
    assert by_consumer[("end", 0)]["offset"] == 0 and by_consumer[("end", 1)]["offset"] == 6
    assert (by_consumer[("ts", 1)]["offset"], by_consumer[("ts", 1)]["timestamp"]) == (3, ts0 + 3000)
    (deleted,) = java.of("admin", "deleted")
    assert deleted["still_listed"] is False


def test_admin_consumer_groups(java: JavaRun) -> None:
    (group,) = java.of("admin_groups", "group")
    assert group["members"] == 1 and group["assigned"] == [0, 1, 2, 3, 4] and group["state"].lower() == "stable", group
    assert group["simple"] is False
    group_offsets = {e["partition"]: e["offset"] for e in java.of("admin_groups", "group_offset")}
    assert group_offsets.get(1) == 6 and all(group_offsets.get(p, 0) == 0 for p in (0, 2, 3, 4)), group_offsets
    (listed,) = java.of("admin_groups", "groups_listed")
    assert listed["contains"] is True


def test_consumer_group_reset_and_delete_offsets(java: JavaRun) -> None:
    """What kafka-consumer-groups --reset-offsets and --delete-offsets call, through the Java Admin."""
    (refused,) = java.of("admin_groups", "delete_offsets_while_subscribed")
    assert refused["error"] == "GroupSubscribedToTopicException", refused  # as Kafka: the live group reads it
    (reset,) = java.of("admin_groups", "reset_offsets")
    assert reset["state"].lower() == "empty", reset
    assert (reset["earliest"], reset["after_earliest"]) == (0, 0), reset
    assert reset["for_future_time"] == -1 and reset["latest"] == 6 and reset["after_shift"] == 4, reset
    (resumed,) = java.of("admin_groups", "resumed")
    assert (resumed["first_offset"], resumed["count"]) == (4, 2), resumed
    (deleted,) = java.of("admin_groups", "offsets_deleted")
    assert deleted["partition_1_left"] is False
