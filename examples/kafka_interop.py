"""A native writer's events read by a Kafka consumer: one event format for both.

    python examples/kafka_interop.py tcp://127.0.0.1:9090 127.0.0.1:9092
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import JsonSerializer, StreamManager


def main(uri: str, bootstrap: str) -> None:
    # A Kafka topic T is the stream kafka/T: create it the Kafka way, with 4 partitions.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("sensor-readings", 4, 1)])["sensor-readings"].result(30)

    with StreamManager(uri) as sm, sm.create_writer("kafka", "sensor-readings", JsonSerializer(),
                                                    writer_id="tutorial-loader") as writer:
        for i in range(10):
            for sensor in ("sensor-7", "sensor-8"):
                writer.write_event({"sensor": sensor, "reading": 20 + i / 10}, routing_key=sensor)
        position = writer.write_event({"sensor": "sensor-7", "reading": 99.9}, routing_key="sensor-7").result()
        print(f"the last event is durable at partition {position.partition}, offset {position.offset}")

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tutorial", "enable.auto.commit": False})
    consumer.assign([TopicPartition("sensor-readings", p, 0) for p in range(4)])
    received = []
    deadline = time.monotonic() + 60
    while len(received) < 21:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(received)} of 21 events arrived")
        for message in consumer.consume(100, 1.0):
            received.append((message.key().decode(), message.value().decode()))
    consumer.close()
    for key, value in received:
        if key == "sensor-7":
            print(key, value)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
