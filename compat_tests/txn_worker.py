"""A consume-transform-produce worker with exactly-once (confluent-kafka): reads an input topic
read_committed, writes each record upper-cased to an output topic, and commits its input offsets in
the same transaction (sendOffsetsToTransaction). Any error ends the process (exit 3): the test runs it
again, and the new instance's init_transactions fences the old one and aborts its open transaction,
so every restart resumes from the last committed transaction.

    python -m compat_tests.txn_worker BOOTSTRAP INPUT OUTPUT TRANSACTIONAL_ID GROUP PARTITIONS [PAUSE]

PAUSE (seconds between transactions) spreads the work out so that kills land in the middle of it.

A watchdog ends the process (exit 4) when one transaction takes longer than STUCK_SECONDS: after a server
restart librdkafka 2.x sometimes never sends the TxnOffsetCommit of send_offsets_to_transaction (the
AddOffsetsToTxn before it is answered; no group FindCoordinator follows) and the call outlives its own
timeout. This is librdkafka's coordinator-request state machine: with a cached group coordinator that is
not up it waits for a broker state change that may never come, and the request's timeout is never
checked (confluentinc/librdkafka issues 5456 and 5511). A restart of the worker is the remedy an
application would use too.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

STUCK_SECONDS = 20.0
BATCH = 20  # input records per transaction (small: many transactions, so kills land inside one)


# librdkafka debug contexts for both clients, when diagnosing a run (e.g. "eos,fetch,cgrp")
DEBUG = {"debug": os.environ["TXN_WORKER_DEBUG"]} if os.environ.get("TXN_WORKER_DEBUG") else {}


def run(bootstrap: str, source: str, sink: str, transactional_id: str, group: str, partitions: int,
        pause: float) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 5,
                         "reconnect.backoff.max.ms": 500, "socket.connection.setup.timeout.ms": 5000, **DEBUG})
    producer.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                         "reconnect.backoff.max.ms": 500, **DEBUG})
    # Assigned (not subscribed) partitions start at the group's committed offsets: the last transaction
    # that committed, since the one the previous instance left open was aborted by init_transactions.
    consumer.assign([TopicPartition(source, p) for p in range(partitions)])
    print("worker ready", flush=True)
    while True:
        msgs = []
        for m in consumer.consume(BATCH, timeout=0.5):
            if m.error() is None:
                msgs.append(m)
            else:
                print(f"consumer error: {m.error()}", flush=True)
        if not msgs:
            continue
        watchdog = threading.Timer(STUCK_SECONDS, _stuck)
        watchdog.start()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, key=m.key(), value=(m.value() or b"").upper())
            producer.poll(0)
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        watchdog.cancel()
        time.sleep(pause)


def _stuck() -> None:
    print(f"worker stuck in one transaction for {STUCK_SECONDS}s: exiting", flush=True)
    os._exit(4)


def main() -> int:
    bootstrap, source, sink, transactional_id, group, partitions = sys.argv[1:7]
    pause = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    try:
        run(bootstrap, source, sink, transactional_id, group, int(partitions), pause)
    except KafkaException as exc:
        print(f"worker failed: {exc}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
