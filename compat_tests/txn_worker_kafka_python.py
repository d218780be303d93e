"""The consume-transform-produce worker of compat_tests/txn_worker.py with kafka-python instead of
confluent-kafka: reads an input topic read_committed, writes each record upper-cased to an output topic,
and commits its input offsets in the same transaction (send_offsets_to_transaction). Any error ends the
process (exit 3): the test runs it again, and the new instance's init_transactions fences the old one and
aborts its open transaction, so every restart resumes from the last committed transaction.

    python -m compat_tests.txn_worker_kafka_python BOOTSTRAP INPUT OUTPUT TRANSACTIONAL_ID GROUP PARTITIONS [PAUSE]

A watchdog ends the process (exit 4) when one transaction takes longer than STUCK_SECONDS. kafka-python
(3.0.12; older releases have the same code) drops a transactional request that is due while its coordinator
is unreachable: in Sender._maybe_send_pending_request (kafka/producer/sender.py) the coordinator's
await_ready raises KafkaConnectionError, the except branch queues a FindCoordinator and breaks out of the
loop, but target_node still names the coordinator, so the closing `if target_node is None: retry(...)` never
requeues the request (Java's Sender calls maybeFindCoordinatorAndRetry, which does both). The dropped
AddOffsetsToTxn, TxnOffsetCommit or EndTxn never completes, and send_offsets_to_transaction and
commit_transaction wait for it without a timeout, even after the broker is back. A server SIGKILL while the
worker is between send() and commit_transaction() hits it: minimally, begin_transaction(), send(), SIGKILL
the broker, send_offsets_to_transaction(), restart the broker on the same port: the call never returns. A
restart of the worker is the remedy an application would use too.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

STUCK_SECONDS = 10.0  # a healthy transaction takes well under a second, a server restart a few seconds
BATCH = 20  # input records per transaction (small: many transactions, so kills land inside one)


def run(bootstrap: str, source: str, sink: str, transactional_id: str, group: str, partitions: int,
        pause: float) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                             transaction_timeout_ms=10000, linger_ms=5, reconnect_backoff_max_ms=500)
    producer.init_transactions()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                             reconnect_backoff_max_ms=500)
    # Assigned (not subscribed) partitions start at the group's committed offsets: the last transaction
    # that committed, since the one the previous instance left open was aborted by init_transactions.
    assigned = [TopicPartition(source, p) for p in range(partitions)]
    consumer.assign(assigned)
    print("worker ready", flush=True)
    while True:
        polled = consumer.poll(timeout_ms=500, max_records=BATCH)
        if not polled:
            continue
        watchdog = threading.Timer(STUCK_SECONDS, _stuck)
        watchdog.start()
        producer.begin_transaction()
        for records in polled.values():
            for r in records:
                producer.send(sink, key=r.key, value=(r.value or b"").upper())
        offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in assigned}
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        producer.commit_transaction()
        watchdog.cancel()
        time.sleep(pause)


def _stuck() -> None:
    print(f"worker stuck in one transaction for {STUCK_SECONDS}s: exiting", flush=True)
    os._exit(4)


def main() -> int:
    # The sender's warnings go to the worker's log, so a watchdog exit can be matched to the dropped request
    # ("Got an exception when trying to find a node to send a transactional request"); TXN_WORKER_DEBUG=debug
    # logs everything when diagnosing a run. SIGUSR1 prints every thread's stack.
    debug = os.environ.get("TXN_WORKER_DEBUG")
    logging.basicConfig(level=(debug or "critical").upper(),
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s: %(message)s")
    if not debug:
        logging.getLogger("kafka.producer.sender").setLevel(logging.WARNING)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    bootstrap, source, sink, transactional_id, group, partitions = sys.argv[1:7]
    pause = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    try:
        run(bootstrap, source, sink, transactional_id, group, int(partitions), pause)
    except KafkaError as exc:
        print(f"worker failed: {exc!r}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
