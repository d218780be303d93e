"""Transactions: events visible all at once on commit, never on abort, read by a read_committed consumer.

    python examples/transactions.py tcp://127.0.0.1:9090 127.0.0.1:9092
"""

from __future__ import annotations

import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import StreamManager, StringSerializer, TxnStatus


def main(uri: str, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(30)

    with StreamManager(uri) as sm:
        txw = sm.create_transaction_writer("kafka", "orders", writer_id="order-loader",
                                           serializer=StringSerializer(), lease_ms=30_000)

        # Commit: on a clean exit from the with block; commit() returns once it is durable.
        with txw.begin_txn() as txn:
            txn.write_event("order-1 placed", routing_key="customer-1")
            txn.write_event("order-1 paid", routing_key="customer-1")
            txn.write_event("order-2 placed", routing_key="customer-2")
        print(f"transaction {txn.txn_id}: {txn.check_status().value}")

        # Abort: nothing of it will ever be visible.
        doomed = txw.begin_txn()
        doomed.write_event("order-3 placed", routing_key="customer-3")
        doomed.abort()
        print(f"second transaction: {doomed.check_status().value}")

        # Another process can look a transaction up by its id, and finish it.
        third = txw.begin_txn()
        third.write_event("order-4 placed", routing_key="customer-1")
        third.flush()
        same = txw.get_txn(third.txn_id)
        print(f"found again: {same.check_status().value}")
        same.commit()
        assert third.check_status() == TxnStatus.COMMITTED

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "order-audit", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition("orders", p, OFFSET_BEGINNING) for p in range(2)])
    values, at_end = [], set()
    while len(at_end) < 2:
        for message in consumer.consume(100, 1.0):
            if message.error() is None:
                values.append(message.value().decode())
            elif message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
    consumer.close()
    for value in sorted(values):
        print("read:", value)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
