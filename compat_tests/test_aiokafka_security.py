"""aiokafka (the asyncio Kafka client) over the secured listeners: SASL_PLAINTEXT with PLAIN and
SCRAM-SHA-256, SSL, SASL_SSL with SCRAM-SHA-512, and SSL with a client certificate (mTLS). Each produces
and consumes a few records with its own implementation of the SASL mechanisms and of TLS (Python's ssl
module), and is refused with a wrong password."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server_process import ServerProcess, add_scram_args
from tests.tls_files import make_certificates

aiokafka = pytest.importorskip("aiokafka")
pytestmark = pytest.mark.timeout(120)

PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"


class Secured:
    def __init__(self, server: ServerProcess, ca: Path, cert: Path, key: Path) -> None:
        self.server, self.ca, self.cert, self.key = server, ca, cert, key

    def settings(self, listener: str, mechanism: str | None = None, password: str | None = None) -> dict[str, Any]:
        from aiokafka.helpers import create_ssl_context

        protocol = "SSL" if listener == "MTLS" else listener
        conf: dict[str, Any] = {"bootstrap_servers": f"127.0.0.1:{self.server.ports[f'kafka:{listener}']}",
                                "security_protocol": protocol}
        if mechanism is not None:
            user = PLAIN_USER if mechanism == "PLAIN" else SCRAM_USER
            right = PLAIN_PASSWORD if mechanism == "PLAIN" else SCRAM_PASSWORD
            conf |= {"sasl_mechanism": mechanism, "sasl_plain_username": user,
                     "sasl_plain_password": right if password is None else password}
        if "SSL" in protocol:
            certificate = {"certfile": str(self.cert), "keyfile": str(self.key)} if listener == "MTLS" else {}
            conf["ssl_context"] = create_ssl_context(cafile=str(self.ca), **certificate)
        return conf


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("aiokafka")
    certificates = make_certificates(home)
    server_pem, ca_pem = certificates.server_pem, certificates.ca_pem
    cert, key = certificates.client("client", "client")
    plain = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    lines = [
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
        "MTLS://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,"
        "SASL_SSL:SASL_SSL,MTLS:SSL",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={ca_pem}",
        "listener.name.mtls.ssl.client.auth=required",
    ]
    for listener in ("sasl_plaintext", "sasl_ssl"):
        lines += [f"listener.name.{listener}.plain.sasl.jaas.config={plain}",
                  f"listener.name.{listener}.scram-sha-256.sasl.jaas.config={scram}",
                  f"listener.name.{listener}.scram-sha-512.sasl.jaas.config={scram}"]
    properties = home / "server.properties"
    properties.write_text("\n".join(lines) + "\n")
    server = ServerProcess(str(home / "data"), "--config", str(properties),
                           *add_scram_args(home, f"SCRAM-SHA-256=[name={SCRAM_USER},password={SCRAM_PASSWORD}]",
                                           f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]")).start()
    try:
        yield Secured(server, ca_pem, cert, key)
        assert server.stop(timeout=30) == 0
    finally:
        server.kill()


async def _roundtrip(conf: dict[str, Any], topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(**conf, enable_idempotence=True)
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topic, f"v{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, **conf, group_id=f"g-{topic}", auto_offset_reset="earliest")
    await consumer.start()
    values: list[bytes] = []
    try:
        while len(values) < 3:
            batches = await consumer.getmany(timeout_ms=10_000)
            assert batches, "no records within 10 s"
            values += [record.value for records in batches.values() for record in records]
        await consumer.commit()
    finally:
        await consumer.stop()
    return values


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SSL", None),
    ("SASL_SSL", "SCRAM-SHA-512"), ("MTLS", None),
])
def test_aiokafka_produces_and_consumes(secured: Secured, listener: str, mechanism: str | None) -> None:
    topic = f"aio-{uuid.uuid4().hex[:10]}"
    assert asyncio.run(_roundtrip(secured.settings(listener, mechanism), topic)) == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512")])
def test_aiokafka_with_a_wrong_password_is_refused(secured: Secured, listener: str, mechanism: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def start() -> None:
        producer = AIOKafkaProducer(**secured.settings(listener, mechanism, password="wrong"),
                                    request_timeout_ms=10_000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaError):
        asyncio.run(start())
    # aiokafka reports every bootstrap failure alike; its log says this one was the server's refusal.
    assert any("Authentication failed" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
