"""What Spark's built-in Kafka connector (spark-sql-kafka-0-10, Spark 4.0) does on the wire, made by the Java
kafka-clients 3.9 (the version Spark 4.0 ships with) and 4.x against a real Millrace server.

The connector jar itself cannot be fetched here, so compat_tests/java/SparkWireClient.java mirrors its call
sequences and configurations (see that file's comment): the driver's Admin (describeTopics, listTopics,
listOffsets earliest/latest/forTimestamp with read_uncommitted), executor consumers (assign + seek + poll with
auto.offset.reset=none and a never-joined group id, the available-range probes, data-loss detection after
deleteRecords), a query running while CreatePartitions adds partitions, and the sink's shared default
producer. What test_java_clients.py already covers (codecs, bulk idempotent producing, groups, the
consumer's offset lookups) is not repeated. One JVM per client version runs every scenario."""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest

from compat_tests.java_support import VERSIONS, JavaRun, run_main
from tests.server_process import ServerProcess

RUN_TIMEOUT = 300.0
SCENARIOS = ["offsets", "executor", "new_partitions", "sink"]

pytestmark = pytest.mark.timeout(int(RUN_TIMEOUT) + 60)


@pytest.fixture(scope="module", params=VERSIONS)
def spark_wire(request: pytest.FixtureRequest, server: ServerProcess) -> JavaRun:
    version: str = request.param
    prefix = f"sparkwire{version.replace('.', '')}-{uuid.uuid4().hex[:8]}"
    return run_main(version, "SparkWireClient", [server.bootstrap, prefix, *SCENARIOS], RUN_TIMEOUT)


def first_offset_at_or_after(records: list[tuple[int, int]], target: int) -> tuple[int, int]:
    """Kafka's ListOffsets by timestamp: the first offset whose timestamp is >= target, with its timestamp,
    or (-1, -1). ``records`` is (offset, timestamp) in offset order; timestamps need not be monotonic."""
    for offset, ts in records:
        if ts >= target:
            return offset, ts
    return -1, -1


def test_driver_admin_lists_partitions_and_offsets(spark_wire: JavaRun) -> None:
    run = spark_wire
    produced: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for e in run.of("offsets", "produced"):
        produced[(e["topic"], e["partition"])].append((e["offset"], e["ts"]))
    topics = sorted({t for t, _ in produced})
    a, b = topics
    assert [o for o, _ in produced[(a, 0)]] == list(range(8)) and [o for o, _ in produced[(a, 1)]] == list(range(8))
    (listed,) = run.of("offsets", "listed")
    assert listed["topics"] == [a, b], "listTopics().listings() (subscribePattern) shows both, neither internal"
    (described,) = run.of("offsets", "described")
    assert described["partitions"] == [f"{a}:0", f"{a}:1", f"{a}:2", f"{b}:0", f"{b}:1"]
    offsets = {(e["spec"], e["topic"], e["partition"]): e["offset"] for e in run.of("offsets", "offset")}
    everything = [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1)]
    for tp in everything:
        assert offsets[("earliest", *tp)] == 0, (tp, offsets)
        assert offsets[("latest", *tp)] == len(produced.get(tp, [])), (tp, offsets)
    by_ts = run.of("offsets", "by_ts")
    targets = sorted({e["target"] for e in by_ts})
    assert len(targets) == 12
    for e in by_ts:
        want = first_offset_at_or_after(produced.get((e["topic"], e["partition"]), []), e["target"])
        assert (e["offset"], e["ts"] if e["offset"] >= 0 else -1) == want, (
            f"forTimestamp({e['target']}) on {e['topic']}:{e['partition']} gave {e['offset']}@{e['ts']}, "
            f"expected {want}; records (offset, ts): {produced.get((e['topic'], e['partition']))}")
    assert len(by_ts) == 12 * len(everything)


def test_executor_consumer_reads_ranges_and_detects_data_loss(spark_wire: JavaRun) -> None:
    run = spark_wire
    ranges = {e["partition"]: (e["earliest"], e["latest"]) for e in run.of("executor", "range")}
    assert ranges == {0: (0, 40), 1: (0, 0)}
    (read,) = run.of("executor", "read")
    assert read["offsets"] == list(range(5, 40))
    assert read["values"] == [f"v{n}" for n in range(5, 40)]
    assert read["keys"] == [f"k{n % 3}" for n in range(5, 40)]
    # Records arrive a poll at a time, not one poll per record (Spark's fetched-data buffer is used).
    assert read["polls"] < 35, read["polls"]
    (reread,) = run.of("executor", "reread")
    assert reread["offsets"] == list(range(12)) and reread["values"] == [f"v{n}" for n in range(12)]
    (deleted,) = run.of("executor", "deleted")
    assert deleted["low_watermark"] == 10
    (loss,) = run.of("executor", "data_loss")
    assert loss["how"] in ("poll", "range"), f"reading offset 3 below the log start was not detected: {loss}"
    assert (loss["earliest"], loss["latest"]) == (10, 40)
    (after,) = run.of("executor", "after_loss")
    assert after["from"] == 10 and after["offsets"] == list(range(10, 40))
    assert after["values"] == [f"v{n}" for n in range(10, 40)]


def test_query_reads_partitions_added_while_it_runs(spark_wire: JavaRun) -> None:
    run = spark_wire
    (prod,) = run.of("new_partitions", "produced_all")
    assert prod["i"] == list(range(1500)), "every record acknowledged"
    sent: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for i, p, o in zip(prod["i"], prod["partitions"], prod["offsets"], strict=True):
        sent[p].append((o, f"r{i}"))
    for p in sent:
        sent[p].sort()
        assert [o for o, _ in sent[p]] == list(range(len(sent[p]))), f"partition {p}: offsets not dense"
    assert set(sent) == {0, 1, 2, 3, 4}, f"records landed in partitions {sorted(sent)}"

    got: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for e in run.of("new_partitions", "read"):
        assert e["offsets"] == list(range(e["from"], e["until"])), e
        got[e["partition"]].extend(zip(e["offsets"], e["values"], strict=True))
    assert dict(got) == dict(sent), "the query read every record exactly once"

    (grew,) = run.of("new_partitions", "grew")
    batches = run.of("new_partitions", "batch")
    before = [b for b in batches if b["batch"] <= grew["after_batch"]]
    after = [b for b in batches if b["batch"] > grew["after_batch"]]
    assert before and all(b["partitions"] == [0, 1, 2] for b in before)
    assert after, "no micro-batch after the partitions were added"
    # The very next describeTopics sees the new partitions, and they start at their earliest offset (0).
    assert after[0]["partitions"] == [0, 1, 2, 3, 4] and after[0]["new"] == [3, 4], after[0]
    assert after[0]["new_earliest"] == [0, 0]
    assert all(b["new"] == [] for b in after[1:])
    # Offsets never go backwards between batches (Spark would log "incorrect offsets" and retry).
    last: dict[int, int] = {}
    for b in batches:
        for p, start, end in b["ranges"]:
            assert start == last.get(p, 0) and end >= start, (b, last)
            last[p] = end


def test_sink_producer_shared_by_task_threads(spark_wire: JavaRun) -> None:
    run = spark_wire
    (acks,) = run.of("sink", "acks")
    assert len(acks["acks"]) == 2000
    placed: dict[int, dict[int, str]] = defaultdict(dict)
    for ident, p, o in acks["acks"]:
        assert o not in placed[p], f"two records at partition {p} offset {o}"
        placed[p][o] = ident
    reads = {e["partition"]: e for e in run.of("sink", "read")}
    assert set(reads) == {0, 1, 2}
    for p, e in reads.items():
        assert e["offsets"] == list(range(len(placed.get(p, {})))), f"partition {p}: offsets not dense"
        assert e["values"] == [placed[p][o] for o in e["offsets"]]
        for ident, key, headers in zip(e["values"], e["keys"], e["headers"], strict=True):
            task, i = ident.split("-")
            assert key == f"key-{int(i) % 11}" and headers == f"task={task};"
    # Keyed records of one task thread keep their order within a partition.
    for p, e in reads.items():
        for task in range(4):
            mine = [int(v.split("-")[1]) for v in e["values"] if v.startswith(f"{task}-")]
            assert mine == sorted(mine), (p, task)

