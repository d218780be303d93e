"""What the secured-listener tests share: a test certificate authority and its PEM files (made at set-up
with trustme, never committed), and librdkafka's round trip and refusal as the tests read them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Certificates:
    """A CA (``ca_pem``) and a server certificate for 127.0.0.1 and localhost with its key in one PEM file
    (``server_pem``, what ``ssl.keystore.location`` takes)."""

    ca: Any  # trustme.CA: issues client certificates
    home: Path
    ca_pem: Path
    server_pem: Path

    def client(self, name: str, common_name: str) -> tuple[Path, Path]:
        """A client certificate (subject CN ``common_name``) and its key, as PEM files."""
        issued = self.ca.issue_cert(f"{name}@example.com", common_name=common_name)
        cert, key = self.home / f"{name}.pem", self.home / f"{name}.key"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        return cert, key


def make_certificates(home: Path) -> Certificates:
    """A fresh CA and server certificate in ``home`` (skips the test without trustme)."""
    import pytest

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_pem, ca_pem = home / "server.pem", home / "ca.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    return Certificates(ca, home, ca_pem, server_pem)


def librdkafka_roundtrip(conf: dict[str, Any], topic: str) -> list[bytes]:
    """An idempotent confluent-kafka producer writes three records, a consumer reads them back."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({**conf, "enable.idempotence": True, "message.timeout.ms": 20000})
    errors: list[Any] = []
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, _m: errors.append(e) if e else None)
    assert producer.flush(30) == 0 and errors == []
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def librdkafka_refusal(conf: dict[str, Any]) -> str:
    """What librdkafka reports for a client the listener refuses (its error callback's text)."""
    from confluent_kafka import Producer

    seen: list[str] = []
    producer = Producer({**conf, "error_cb": lambda e: seen.append(e.str()), "message.timeout.ms": 3000})
    producer.produce("never", b"x")
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    return " | ".join(seen)
