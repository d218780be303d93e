"""A producer id is bound to what issued it: a client that read another's batches (and so their producer
id, epoch and sequence) cannot write under them. Before, a forged batch at the victim's next sequence
was accepted, and the victim's own next batch was acknowledged as its "duplicate", at the forged
batch's offset: an acknowledged record lost. Kafka's answers: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
transactional records without a transactional id; a stolen idempotent id answers UNKNOWN_PRODUCER_ID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.raw_kafka import KafkaSocket
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.fetch import FetchRequest
from millrace.gateway.kafka_protocol.messages.produce import ProduceRequest
from millrace.protocol.records import build_record_batch, iter_batches
from tests.server_process import ServerProcess

PASSWORDS = {"victim": "victim-secret", "thief": "thief-secret"}
TOPIC = "payments"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
    properties = tmp_path / "server.properties"
    properties.write_text("\n".join([
        "listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}"]) + "\n")
    properties.chmod(0o600)
    with ServerProcess(str(tmp_path / "data"), "--config", str(properties)) as s:
        yield s


def _conf(server: ServerProcess, user: str) -> dict[str, object]:
    return {"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _last_batch_header(thief: KafkaSocket) -> tuple[int, int, int]:
    """(producer id, epoch, next sequence) of the newest batch of the topic, read as any reader can."""
    F = FetchRequest  # noqa: N806 - a generated message class
    fetched = thief.call(F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           topics=[F.FetchTopic(topic=TOPIC, partitions=[F.FetchPartition(
                               partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 12)
    records = fetched.responses[0].partitions[0].records
    last = list(iter_batches(records))[-1].header
    return last.producer_id, last.producer_epoch, last.base_sequence + last.last_offset_delta + 1


def _forge(thief: KafkaSocket, producer_id: int, epoch: int, sequence: int, transactional: bool) -> int:
    batch = build_record_batch([(None, b"forged")], producer_id=producer_id, producer_epoch=epoch,
                               base_sequence=sequence, transactional=transactional)
    P = ProduceRequest  # noqa: N806 - a generated message class
    answer = thief.call(P(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=batch)])]), 9)
    return int(answer.responses[0].partition_responses[0].error_code)


def _read_all(server: ServerProcess, committed: bool) -> list[bytes]:
    consumer = Consumer({**_conf(server, "victim"), "group.id": "audit", "enable.auto.commit": False,
                         "isolation.level": "read_committed" if committed else "read_uncommitted"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    while (message := consumer.poll(3.0)) is not None:
        assert message.error() is None, message.error()
        got.append(message.value())
    consumer.close()
    return got


def test_a_stolen_idempotent_producer_id_writes_nothing(server: ServerProcess) -> None:
    victim = Producer({**_conf(server, "victim"), "enable.idempotence": True, "linger.ms": 0})
    victim.produce(TOPIC, b"first", partition=0)
    assert victim.flush(30) == 0
    thief = KafkaSocket(server.kafka_port).authenticate_plain("thief", PASSWORDS["thief"])
    producer_id, epoch, sequence = _last_batch_header(thief)
    assert _forge(thief, producer_id, epoch, sequence, transactional=False) == ErrorCode.UNKNOWN_PRODUCER_ID
    delivered: list[tuple[object, int]] = []
    victim.produce(TOPIC, b"second", partition=0, on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert victim.flush(30) == 0
    assert delivered == [(None, 1)]
    assert _read_all(server, committed=False) == [b"first", b"second"]


def test_a_transactional_batch_needs_its_transactional_id(server: ServerProcess) -> None:
    victim = Producer({**_conf(server, "victim"), "transactional.id": "ledger", "linger.ms": 0})
    victim.init_transactions(30)
    victim.begin_transaction()
    victim.produce(TOPIC, b"debit", partition=0)
    victim.flush(30)
    thief = KafkaSocket(server.kafka_port).authenticate_plain("thief", PASSWORDS["thief"])
    producer_id, epoch, sequence = _last_batch_header(thief)
    answer = _forge(thief, producer_id, epoch, sequence, transactional=True)
    assert answer == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Nor under the victim's id as an idempotent batch: it was issued to a transactional id.
    assert _forge(thief, producer_id, epoch, sequence, transactional=False) == ErrorCode.UNKNOWN_PRODUCER_ID
    victim.produce(TOPIC, b"credit", partition=0)
    victim.commit_transaction(30)
    assert _read_all(server, committed=True) == [b"debit", b"credit"]
    server.stop()
    server.start()
    assert _read_all(server, committed=True) == [b"debit", b"credit"]
