"""Load and checking for the fault tests: idempotent acks=all confluent-kafka producers and native writers
(writer ids) writing numbered records through a cluster started by ``millrace cluster up``, and a checker
that reads everything back and counts acknowledged / read / lost / duplicated / out of order."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from millrace.client.writer import ALREADY_WRITTEN


@dataclass
class Tally:
    """What a checker found; ``ok`` when nothing acknowledged is missing, doubled or out of order."""

    name: str
    acknowledged: int
    read: int
    lost: int
    duplicated: int
    misplaced: int  # acknowledged at one offset, read at another
    out_of_order: int  # a writer's later record before its earlier one in a partition
    # Acknowledged without an offset: native events answered ALREADY_WRITTEN (a resend after a failover
    # found them landed), and librdkafka's implicit acks (a producer's later batch was acknowledged while
    # this one waited to be retried: the partition's sequence check proves it landed, at no known offset).
    resent: int
    errors: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)  # a few misplaced and lost records, to trace them

    def line(self) -> str:
        return (f"{self.name}: acknowledged {self.acknowledged}, read {self.read}, lost {self.lost}, "
                f"duplicated {self.duplicated}, misplaced {self.misplaced}, out of order {self.out_of_order}, "
                f"client errors {len(self.errors)} (acknowledged without an offset: {self.resent})" + "".join(f"\n  {e}" for e in self.examples))

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.misplaced == 0 and self.out_of_order == 0


def _file_logger(path: str) -> logging.Logger:
    logger = logging.getLogger(f"librdkafka.{path}")
    if not logger.handlers:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return logger


def librdkafka_trace() -> dict[str, Any]:
    """Producer settings that log librdkafka's idempotence decisions (epoch bumps, retries, sequences) to
    the file ``MILLRACE_KAFKA_DEBUG_LOG`` names, to trace a failed check; none when it is not set."""
    path = os.environ.get("MILLRACE_KAFKA_DEBUG_LOG")
    return {"debug": "eos,msg", "logger": _file_logger(path)} if path else {}


class KafkaLoad:
    """``producers`` idempotent acks=all producers, each in a thread, writing ``"<producer>:<n>"`` values
    (key = value) to ``topic`` until ``finish``; ``acked`` maps each acknowledged value to (partition,
    offset). ``client``: librdkafka settings merged into the producers' (and the checker's) configs, e.g. a
    secured cluster's SASL_SSL login (``LocalClusterCli.client_settings``)."""

    def __init__(self, bootstrap: str, topic: str, producers: int = 2, pause: float = 0.003,
                 client: dict[str, Any] | None = None) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.client = dict(client or {})
        self.acked: dict[bytes, tuple[int, int | None]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._pause = pause
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            # Long enough to ride out a node's failover or a whole-cluster restart: a record is either
            # acknowledged or, after this, reported as an error (never silently dropped).
            "message.timeout.ms": 180000, "metadata.max.age.ms": 2000, "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
        }
        config |= self.client | librdkafka_trace()
        self.producers = [Producer({**config, "client.id": f"load-{i}"}) for i in range(producers)]
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(producers)]
        for t in self.threads:
            t.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        # No lock: librdkafka runs this inside poll/flush on whichever thread calls them, and one dict
        # store or list append is atomic under the GIL.
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.errors.append(f"{msg.value()!r}: {err.str()}")  # KafkaError has no __format__

    def _run(self, index: int) -> None:
        producer = self.producers[index]
        n = 0
        while not self._stop.is_set():
            value = f"{index}:{n}".encode()
            try:
                producer.produce(self.topic, key=value, value=value, on_delivery=self._delivered)
            except BufferError:  # the local queue is full (the cluster is slow now): wait for deliveries
                producer.poll(0.1)
                continue
            except Exception as exc:  # noqa: BLE001 - e.g. librdkafka's fatal idempotence errors: report them
                self.errors.append(f"producer {index} stopped: {exc}")
                return
            n += 1
            producer.poll(0)
            time.sleep(self._pause)

    @property
    def count(self) -> int:
        return len(self.acked)

    def wait_for(self, more: int, timeout: float = 60.0) -> None:
        """Until ``more`` further records are acknowledged (the load is flowing)."""
        target = self.count + more
        deadline = time.monotonic() + timeout
        while self.count < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.topic}: only {self.count} of {target} acknowledged; errors {self.errors[:5]}")
            time.sleep(0.05)

    def finish(self, timeout: float = 200.0) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(10)
        for producer in self.producers:
            try:
                left = producer.flush(timeout)
            except Exception as exc:  # noqa: BLE001 - a producer dead of a fatal error: the checker still runs
                self.errors.append(f"flush failed: {exc!r}")
                continue
            if left:
                self.errors.append(f"{left} records neither acknowledged nor failed after {timeout} s")
        self.producers.clear()  # destroyed now, not reconnecting to a cluster the test has stopped

    def check(self, bootstrap: str, partitions: int, timeout: float = 120.0, logs: Path | None = None) -> Tally:
        """Read every partition from its start to its high watermark and compare with what was acknowledged;
        a failed check carries the servers' idempotence refusals from the node logs under ``logs``."""
        read = read_partitions(bootstrap, self.topic, partitions, timeout, self.client)
        result = tally(self.topic, self.acked, read, list(self.errors))
        if not result.ok and logs is not None:
            result.examples += server_refusals(logs)
        return result


def server_refusals(directory: Path, limit: int = 20) -> list[str]:
    """The lines where a node refused an idempotent batch out of sequence (librdkafka bumps the producer's
    epoch on those and resends its unacknowledged batches as new ones: the usual origin of a duplicate)."""
    found = [f"{log.parent.name}: {line.strip()}" for log in sorted(directory.glob("node-*/out.log"))
             for line in log.read_text(errors="replace").splitlines() if "refused producer" in line]
    return found[:limit]


def read_partitions(bootstrap: str, topic: str, partitions: int, timeout: float,
                    client: dict[str, Any] | None = None) -> dict[int, list[tuple[int, bytes]]]:
    """partition -> [(offset, value)] from the log start to the high watermark of each partition
    (``client``: librdkafka settings merged into the consumer's, e.g. a secured cluster's login)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **(client or {})})
    deadline = time.monotonic() + timeout
    try:
        ends = {}
        for p in range(partitions):
            while True:
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    break
                except Exception:  # noqa: BLE001 - a leader still moving: ask again until the deadline
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        read: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            read[msg.partition()].append((msg.offset(), msg.value()))
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        for _ in range(2):  # anything past the watermarks read at the start (a late duplicate) comes now
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                read[msg.partition()].append((msg.offset(), msg.value()))
        missing = sorted(set(range(partitions)) - done)
        assert not missing, f"{topic}: partitions {missing} not read to their high watermarks {ends}"
        return read
    finally:
        consumer.close()


def _without_offset(offset: int | None) -> bool:
    """An acknowledgement that names no offset: ``ALREADY_WRITTEN`` for a native writer that resent an
    event whose first append landed but whose answer was lost; None (confluent-kafka's offset for
    librdkafka's implicit ack) for a batch waiting to be retried when a later batch of the same producer
    was acknowledged, which the partition accepts only in sequence after it."""
    return offset is None or offset == ALREADY_WRITTEN


def _lies_at(read_at: tuple[int, int], acked_at: tuple[int, int | None]) -> bool:
    """Whether a record read at ``read_at`` is where it was acknowledged (only its partition is known for
    an acknowledgement without an offset)."""
    if _without_offset(acked_at[1]):
        return read_at[0] == acked_at[0]
    return read_at == acked_at


def tally(name: str, acked: dict[bytes, tuple[int, int | None]], read: dict[int, list[tuple[int, bytes]]],
          errors: list[str]) -> Tally:
    """Compare acknowledged records (value -> partition, offset or None; values are ``writer:n``) with those read."""
    counts: Counter[bytes] = Counter()
    where: dict[bytes, tuple[int, int]] = {}
    out_of_order = 0
    for partition, records in read.items():
        last: dict[bytes, int] = defaultdict(lambda: -1)
        for offset, value in sorted(records):
            counts[value] += 1
            where.setdefault(value, (partition, offset))
            writer, _, number = value.partition(b":")
            if int(number) <= last[writer]:
                out_of_order += 1
            last[writer] = int(number)
    lost = sum(1 for v in acked if counts[v] == 0)
    duplicated = sum(1 for v in counts if counts[v] > 1)
    misplaced_values = [v for v, at in acked.items() if counts[v] and not _lies_at(where[v], at)]
    # What a failure needs to be traced: which records, where acknowledged, where read, and what is there.
    stored = {(p, offset): value for p, records in read.items() for offset, value in records}
    examples = [f"{v.decode()} acknowledged at {acked[v]} (where {stored.get(acked[v], b'nothing').decode()} is), "
                f"read at {where[v]}" for v in sorted(misplaced_values)[:5]]
    examples += [f"{v.decode()} acknowledged at {acked[v]}, not read" for v in acked if counts[v] == 0][:5]
    resent = sum(1 for _, offset in acked.values() if _without_offset(offset))
    return Tally(name, len(acked), sum(counts.values()), lost, duplicated, len(misplaced_values), out_of_order,
                 resent, errors, examples)


class NativeLoad:
    """Native ``EventStreamWriter``s with writer ids writing ``"<writer>:<n>"`` events (routing key =
    event) through one node's native endpoint into a Kafka topic's stream (scope ``kafka``), so the
    checker reads them back with a Kafka consumer; ``acked`` maps values to (partition, offset)."""

    def __init__(self, endpoint: str, topic: str, writers: int = 2, pause: float = 0.003) -> None:
        from millrace.client.manager import StreamManager

        self.scope, self.stream = "kafka", topic
        self.manager = StreamManager(endpoint, timeout=30.0, reconnect_timeout=120.0)
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._pause = pause
        self.writers = [self._open(topic, f"w{i}") for i in range(writers)]
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(writers)]
        for t in self.threads:
            t.start()

    def _open(self, topic: str, writer_id: str) -> Any:
        """A writer; a node learns of a topic made through another node within a second (its topics-table
        refresh), and until then answers OPEN_WRITER with StreamNotFoundError."""
        from millrace.protocol.errors import StreamNotFoundError

        deadline = time.monotonic() + 10
        while True:
            try:
                return self.manager.create_writer(self.scope, topic, writer_id=writer_id)
            except StreamNotFoundError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _run(self, index: int) -> None:
        writer = self.writers[index]
        n = 0
        while not self._stop.is_set():
            value = f"{index}:{n}".encode()
            future = writer.write_event(value, routing_key=value.decode())
            future.add_done_callback(lambda f, v=value: self._done(v, f))
            n += 1
            time.sleep(self._pause)

    def _done(self, value: bytes, future: Any) -> None:
        exc = future.exception()  # done already: this is its completion callback
        if exc is None:
            position = future.result()
            self.acked[value] = (position.partition, position.offset)
        else:
            self.errors.append(f"{value!r}: {exc!r}")

    @property
    def count(self) -> int:
        return len(self.acked)

    def wait_for(self, more: int, timeout: float = 60.0) -> None:
        target = self.count + more
        deadline = time.monotonic() + timeout
        while self.count < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"native {self.stream}: only {self.count} of {target} acknowledged; "
                                     f"errors {self.errors[:5]}")
            time.sleep(0.05)

    def finish(self, timeout: float = 200.0) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(10)
        deadline = time.monotonic() + timeout
        for writer in self.writers:
            done = threading.Event()
            threading.Thread(target=_flush, args=(writer, done), daemon=True).start()
            if not done.wait(max(0.0, deadline - time.monotonic())):
                self.errors.append(f"writer {writer.writer_id}: events still unacknowledged after {timeout} s")
        self.manager.close()

    def check(self, bootstrap: str, timeout: float = 120.0) -> Tally:
        """Read the topic's partitions back with a Kafka consumer and compare."""
        partitions = len(self.writers[0].slices)
        read = read_partitions(bootstrap, self.stream, partitions, timeout)
        return tally(f"native {self.stream}", self.acked, read, list(self.errors))


def _flush(writer: Any, done: threading.Event) -> None:
    with contextlib.suppress(Exception):  # the failures are in the futures, counted by the load
        writer.flush()
    done.set()
