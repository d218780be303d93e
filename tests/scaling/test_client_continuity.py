"""Unmodified Kafka clients keep working, with no error reaching the application, while the topic they
use is scaled up and down underneath them again and again.

For each client (kafka-python, confluent-kafka, the Java kafka-clients 3.9 and 4.x) a producer writes
keyed records at a steady rate and two consumers in one group (subscribe) read them, while this
process splits the topic's single segment into two, then four, merges back to two and one, for
several rounds, through the native client. Afterwards:

- the producer saw no failed delivery, and its delivery reports give dense offsets per partition in
  send order;
- the group read every acknowledged record exactly once, per partition in offset order (merged over
  both members in the order they were polled; a member commits what it processed when partitions
  are revoked, as an application should);
- no consumer call raised.

The Java clients run in one JVM per version (compat_tests/java/CompatClient.java, scenario
``continuity``) for a fixed time and print JSON that is checked here; they skip if the jars or a JDK
are missing (compat_tests/java/fetch_jars.sh)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from compat_tests.java_support import VERSIONS, classpath
from millrace.client.segments import SegmentClient
from tests.server_process import ServerProcess

PARTITIONS = 8
CONSUMERS = 2
ROUNDS = 3  # each: 1 -> 2 -> 4 -> 2 -> 1 segments
PAUSE = 0.3  # seconds between scale operations
RATE = 400  # records/s produced
KEYS = 256  # record keys k0..k255: every partition gets some under murmur2 and crc32
JAVA_SECONDS = 16.0  # the JVM's producer runs this long; the rounds take 2-3 s each

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("continuity"))).start()
    try:
        yield srv
    finally:
        srv.kill()


@pytest.fixture
def topic(server: ServerProcess, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40] + "-" + uuid.uuid4().hex[:6]
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    # One segment carries all 8 partitions at first; the policy is fixed, so only we scale it.
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config={"millrace.segments.initial": "1"})])[name].result(30)
    before = len(server.output)
    yield name
    new = [line for line in server.output[before:] if "WARNING" in line or "ERROR" in line or "Traceback" in line]
    if new:
        print(f"--- server warnings during {request.node.name} (last 100) ---\n" + "".join(new[-100:]))


# -- scaling ---------------------------------------------------------------------------------------

class Scaler:
    """Runs ``ROUNDS`` rounds of split 1 -> 2 -> 4, merge 4 -> 2 -> 1 on a background thread."""

    def __init__(self, server: ServerProcess, topic: str) -> None:
        self.server = server
        self.topic = topic
        self.counts: list[int] = []  # open segments after each operation
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Scaler:
        self.thread.start()
        return self

    def join(self, timeout: float = 60.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "scaling rounds did not finish"
        if self.error is not None:
            raise AssertionError(f"scaling failed: {self.error!r}") from self.error
        assert self.counts == [2, 3, 4, 3, 2, 1] * ROUNDS, self.counts

    def _run(self) -> None:
        try:
            with SegmentClient("127.0.0.1", self.server.native_port) as admin:
                for _ in range(ROUNDS):
                    self._round(admin)
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def _step(self, desc: dict[str, Any]) -> list[str]:
        self.counts.append(len(desc["segments"]))
        time.sleep(PAUSE)
        return [s["name"] for s in sorted(desc["segments"], key=lambda s: s["key_start"])]

    def _round(self, admin: SegmentClient) -> None:
        names = [s["name"] for s in admin.describe_stream("kafka", self.topic)["segments"]]
        assert len(names) == 1, names
        names = self._step(admin.split_segment("kafka", self.topic, names[0], pieces=2))
        lo, hi = names
        self._step(admin.split_segment("kafka", self.topic, lo, pieces=2))
        names = self._step(admin.split_segment("kafka", self.topic, hi, pieces=2))
        names = self._step(admin.merge_segments("kafka", self.topic, names[:2]))
        names = self._step(admin.merge_segments("kafka", self.topic, names[1:]))
        self._step(admin.merge_segments("kafka", self.topic, names))


# -- checks ----------------------------------------------------------------------------------------

def check_exactly_once(total: int, produced: dict[int, tuple[int, int]], consumed: list[tuple[int, int, int]],
                       ) -> None:
    """``produced``: send index -> (partition, offset) from the delivery reports; ``consumed``:
    (partition, offset, send index) in the order the group's members polled them."""
    assert len(produced) == total, f"{total - len(produced)} of {total} sends have no delivery report"
    sent: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for index in sorted(produced):
        partition, offset = produced[index]
        sent[partition].append((offset, index))
    for partition, pairs in sent.items():
        offsets = [o for o, _ in pairs]
        assert offsets == list(range(len(pairs))), f"partition {partition}: offsets in send order not dense"
    got: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for partition, offset, index in consumed:
        got[partition].append((offset, index))
    assert set(got) <= set(sent), sorted(set(got) - set(sent))
    for partition, pairs in sent.items():
        have = got.get(partition, [])
        if have != pairs:
            seen = [o for o, _ in have]
            dups = len(seen) - len(set(seen))
            missing = sorted(set(range(len(pairs))) - set(seen))[:10]
            raise AssertionError(f"partition {partition}: consumed {len(have)} records for {len(pairs)} produced "
                                 f"({dups} duplicates, first missing offsets {missing}, "
                                 f"in order: {seen == sorted(seen)})")
    assert len(sent) == PARTITIONS, f"only partitions {sorted(sent)} got records"


class Group:
    """What the consumer threads saw, shared between them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.consumed: list[tuple[int, int, int]] = []
        self.errors: list[str] = []
        self.assigned = 0
        self.stop = threading.Event()

    def add(self, records: list[tuple[int, int, int]]) -> None:
        with self.lock:
            self.consumed.extend(records)

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)

    def count(self) -> int:
        with self.lock:
            return len(self.consumed)

    def wait_assigned(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.assigned == PARTITIONS:
                    return
            time.sleep(0.05)
        raise AssertionError(f"the group never assigned all {PARTITIONS} partitions ({self.assigned})")

    def drain(self, acked: int, timeout: float = 90.0) -> None:
        """Until the group has read ``acked`` records (then a second more, to catch duplicates). The
        wait is long because under a full test run two Python consumers, a producer and the server
        share two cores, and a consumer can fall far behind before it catches up."""
        deadline = time.monotonic() + timeout
        while self.count() < acked and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        self.stop.set()


def value_index(value: bytes) -> int:
    return int(value.split(b"-", 1)[1])


def paced(rate: int, stop: threading.Event, send: Callable[[int], None]) -> int:
    """Calls ``send(i)`` ``rate`` times a second until ``stop``; returns how many were sent."""
    t0 = time.monotonic()
    i = 0
    while not stop.is_set():
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(min(delay, 0.05))
            continue
        send(i)
        i += 1
    return i


def confluent_group_member(server: ServerProcess, topic: str, group: Group, client_id: str,
                           batch_size: int = 500) -> None:
    """One confluent-kafka member of ``group``: subscribe, record what it reads, commit what it
    processed when partitions are revoked, until the group is stopped."""
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"{topic}-group", "client.id": client_id,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 200})

    def on_assign(consumer: Consumer, partitions: list) -> None:
        with group.lock:
            group.assigned += len(partitions)

    def on_revoke(consumer: Consumer, partitions: list) -> None:
        with group.lock:
            group.assigned -= len(partitions)
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                group.error(f"commit on revoke: {exc}")

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not group.stop.is_set():
            batch = []
            for m in c.consume(batch_size, 0.2):
                if m.error() is not None:
                    group.error(str(m.error()))
                else:
                    batch.append((m.partition(), m.offset(), value_index(m.value())))
            group.add(batch)
    finally:
        c.close()


def run_python_clients(server: ServerProcess, topic: str, start_consumer: Callable[[Group, int], None],
                       produce: Callable[[threading.Event, dict[int, tuple[int, int]], list[str]], int]) -> None:
    group = Group()
    consumers = [threading.Thread(target=start_consumer, args=(group, n), daemon=True) for n in range(CONSUMERS)]
    for t in consumers:
        t.start()
    group.wait_assigned()
    produced: dict[int, tuple[int, int]] = {}
    send_errors: list[str] = []
    stop = threading.Event()
    total: list[int] = []
    producer = threading.Thread(target=lambda: total.append(produce(stop, produced, send_errors)), daemon=True)
    producer.start()
    time.sleep(1.0)
    scaler = Scaler(server, topic).start()
    try:
        scaler.join()
    finally:
        time.sleep(1.0)
        stop.set()
        producer.join(60)
    assert not producer.is_alive() and total, "the producer did not finish"
    group.drain(len(produced))
    for t in consumers:
        t.join(30)
    assert not send_errors, f"{len(send_errors)} failed deliveries, first: {send_errors[:5]}"
    assert not group.errors, f"consumer errors: {group.errors[:5]}"
    check_exactly_once(total[0], produced, group.consumed)
    assert total[0] > RATE * 5


# -- confluent-kafka -------------------------------------------------------------------------------

def test_confluent_kafka_through_scaling(server: ServerProcess, topic: str) -> None:
    def consume(group: Group, n: int) -> None:
        confluent_group_member(server, topic, group, f"confluent-{n}")

    def produce(stop: threading.Event, produced: dict[int, tuple[int, int]], errors: list[str]) -> int:
        p = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "linger.ms": 5})

        def send(i: int) -> None:
            def delivered(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    errors.append(f"{i}: {err}")
                else:
                    produced[i] = (msg.partition(), msg.offset())

            p.produce(topic, f"c-{i}".encode(), key=f"k{i % KEYS}".encode(), on_delivery=delivered)
            p.poll(0)

        n = paced(RATE, stop, send)
        remaining = p.flush(30)
        assert remaining == 0, f"{remaining} records still queued"
        return n

    run_python_clients(server, topic, consume, produce)


# -- kafka-python ----------------------------------------------------------------------------------

def unstick_kafka_python_join(consumer: KafkaConsumer) -> bool:
    """Work around a kafka-python 3.0.12 bug that left a member without partitions until its session
    expired (45 s), so the group read late or not at all (the test's old flake).

    Traced with the coordinator's debug log: a member that led generation 1 assigned partitions before
    its consumer had metadata for the topic (``assignment_snapshot == {}``), so once metadata arrived
    ``ConsumerCoordinator.need_rejoin()`` asked it to rejoin. ``join_group_async`` leaves the join task
    in flight when a ``poll(timeout_ms=200)`` times out and re-awaits it on the next poll *while
    need_rejoin() holds*; but as leader, the task itself sets ``_assignment_snapshot`` to the metadata
    snapshot before its SyncGroup, which makes need_rejoin() false. When the poll timed out between
    that and the SyncGroup answer, no later poll awaits the finished task: ``_on_join_complete`` never
    runs (no assignment, heartbeats stay disabled) and the consumer spins until the session times out.
    (kafka-python's own tracker: the diagnostics of dpkp/kafka-python#2855 chase the same symptom.)
    Java and librdkafka complete a join whatever their poll timeouts, and so does kafka-python as a
    follower, whose ``rejoin_needed`` stays set until the join is consumed.

    The workaround asks for the rejoin kafka-python would do as a follower: a finished join task that
    nobody consumed while no rejoin is needed is exactly that state. It touches no record and no offset,
    so every check of the test stays as strict. Returns whether it fired."""
    coordinator = consumer._coordinator
    task = coordinator._join_task
    if task is not None and task.is_done and not coordinator.need_rejoin():
        coordinator.request_rejoin()
        return True
    return False


def test_kafka_python_through_scaling(server: ServerProcess, topic: str) -> None:
    def consume(group: Group, n: int) -> None:
        c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=f"{topic}-group", client_id=f"kp-{n}",
                          auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=200)

        # kafka-python 3 runs listeners on its I/O thread, where a blocking commit is refused: commit
        # after each processed poll instead, so a revocation never loses or repeats anything.
        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                with group.lock:
                    group.assigned -= len(revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                with group.lock:
                    group.assigned += len(assigned)

        # Warm the topic's metadata first: kafka-python's range assignor assigns nothing for a topic it
        # has no metadata for yet, and a leader that joined that early leaves the group short.
        deadline = time.monotonic() + 30
        while len(c.partitions_for_topic(topic) or ()) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.1)
        c.subscribe(topics=[topic], listener=Listener())
        try:
            while not group.stop.is_set():
                try:
                    polled = c.poll(timeout_ms=200, max_records=500)
                except Exception as exc:  # noqa: BLE001 - any error reaching the application fails the test
                    group.error(repr(exc))
                    continue
                group.add([(r.partition, r.offset, value_index(r.value)) for recs in polled.values() for r in recs])
                if unstick_kafka_python_join(c):
                    print(f"kp-{n}: a finished join nobody consumed; rejoining (kafka-python 3.0.12 bug)")
                if polled:
                    try:
                        c.commit()
                    except Exception as exc:  # noqa: BLE001 - as above
                        group.error(f"commit: {exc!r}")
        finally:
            c.close(autocommit=False)

    def produce(stop: threading.Event, produced: dict[int, tuple[int, int]], errors: list[str]) -> int:
        p = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=5)  # idempotent, acks=all by default

        def send(i: int) -> None:
            future = p.send(topic, key=f"k{i % KEYS}".encode(), value=f"c-{i}".encode())
            future.add_callback(lambda md: produced.__setitem__(i, (md.partition, md.offset)))
            future.add_errback(lambda exc: errors.append(f"{i}: {exc!r}"))

        n = paced(RATE, stop, send)
        p.flush(30)
        p.close(10)
        return n

    run_python_clients(server, topic, consume, produce)


# -- Java kafka-clients 3.9 / 4.x ------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_java_clients_through_scaling(server: ServerProcess, topic: str, version: str, tmp_path: Path) -> None:
    cp = classpath(version)  # skips when the jars or a JDK are missing
    scenario = f"continuity:{topic}:{JAVA_SECONDS}:{RATE}:{CONSUMERS}"
    cmd = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, "CompatClient",
           server.bootstrap, str(tmp_path), "cont", scenario]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    producing = threading.Event()
    stderr: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                events[event["event"]].append(event)
                if event["event"] == "producing":
                    producing.set()
        producing.set()

    def read_stderr() -> None:
        assert proc.stderr is not None
        stderr.extend(proc.stderr)

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for t in readers:
        t.start()
    try:
        assert producing.wait(60) and events["producing"], f"the JVM never started producing: {''.join(stderr)[-3000:]}"
        started = time.monotonic()
        time.sleep(1.0)
        scaler = Scaler(server, topic).start()
        scaler.join()
        assert time.monotonic() - started < JAVA_SECONDS, "the scaling outlasted the Java producer; raise JAVA_SECONDS"
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
        for t in readers:
            t.join(10)
    tail = "".join(stderr)[-3000:]
    assert proc.returncode == 0, f"JVM exited {proc.returncode}: {tail}"
    (start,) = events["start"]
    assert str(start["clientVersion"]).startswith(version.rstrip("x")), start
    errors = events["error"]
    assert not errors, f"Java {version}: {errors[0]['error']}"
    assert events["done"], f"Java {version}: scenario did not finish: {tail}"
    (ready,) = events["group_ready"]
    assert ready["assigned"] == PARTITIONS, ready
    (producing_event,) = events["producing"]
    assert producing_event["idempotence"] is True and producing_event["acks"] in ("all", "-1"), producing_event
    (produced_all,) = events["produced_all"]
    assert produced_all["error_count"] == 0, f"Java {version}: failed deliveries: {produced_all['errors']}"
    produced = {i: (p, o) for i, (p, o) in enumerate(zip(produced_all["partitions"], produced_all["offsets"],
                                                         strict=True)) if o >= 0}
    (consumed_all,) = events["consumed_all"]
    assert consumed_all["error_count"] == 0, f"Java {version}: consumer errors: {consumed_all['errors']}"
    consumed = list(zip(consumed_all["partitions"], consumed_all["offsets"], consumed_all["indexes"], strict=True))
    check_exactly_once(producing_event["records"], produced, consumed)
