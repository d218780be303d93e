"""AlterUserScramCredentials answers as Kafka does, through a real Kafka admin client (confluent-kafka's
AdminClient, as its own integration test calls it) against a real server: a 4-byte salt (that test's
``b"salt"``) is accepted and its user logs in, over the Kafka listener with librdkafka and over the native
listener with the native client; an iteration count outside Kafka's [4096, 16384] is refused with
UNACCEPTABLE_CREDENTIAL and Kafka's own message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(120)

SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("scram-rules")
    properties = home / "server.properties"
    properties.write_text("\n".join([
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,NATIVE:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
        *(f"listener.name.{listener}.{mechanism}.sasl.jaas.config={SCRAM_JAAS}"
          for listener in ("sasl_plaintext", "native") for mechanism in ("scram-sha-256", "scram-sha-512")),
        # librdkafka retries a wrong password about twenty times a second: the failed-login limit per
        # address (tests/security/test_connection_limits.py) would refuse the later tests' new users.
        "millrace.authentication.failures.max=1000000",
    ]) + "\n")
    with ServerProcess(str(home / "data"), "--config", str(properties)) as process:
        yield process


def upsert(server: ServerProcess, user: str, mechanism: Any, iterations: int, salt: bytes | None) -> None:
    """One upsertion through confluent-kafka's AdminClient on the PLAINTEXT listener; raises Kafka's error."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    upsertion = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), b"short-salt-secret",
                                             salt)
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(30)


def kafka_login(server: ServerProcess, mechanism: str, user: str, password: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.ports['kafka:SASL_PLAINTEXT']}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                         "sasl.username": user, "sasl.password": password})
    try:
        admin.list_topics(timeout=5)
        return True
    except Exception:  # noqa: BLE001 - librdkafka's authentication failure, or a timeout after it
        return False


def native_login(server: ServerProcess, mechanism: str, user: str, password: str) -> bool:
    from millrace import AuthenticationError, StreamManager

    try:
        with StreamManager(f"127.0.0.1:{server.native_port}", username=user, password=password,
                           mechanism=mechanism) as manager:
            manager.list_scopes()
        return True
    except AuthenticationError:
        return False


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_four_byte_salt_is_accepted_and_logs_in(server: ServerProcess, mechanism: str) -> None:
    from confluent_kafka.admin import ScramMechanism

    user = f"salty-{mechanism.lower()}"
    upsert(server, user, ScramMechanism[mechanism.replace("-", "_")], 8192, b"salt")
    assert kafka_login(server, mechanism, user, "short-salt-secret")
    assert native_login(server, mechanism, user, "short-salt-secret")
    assert not kafka_login(server, mechanism, user, "wrong")
    assert not native_login(server, mechanism, user, "wrong")


@pytest.mark.parametrize(("iterations", "message"), [(4095, "Too few iterations"), (16385, "Too many iterations")])
def test_iterations_outside_kafkas_range_are_refused_as_kafka_refuses_them(server: ServerProcess, iterations: int,
                                                                           message: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ScramMechanism

    with pytest.raises(KafkaException) as refused:
        upsert(server, "counted", ScramMechanism.SCRAM_SHA_256, iterations, b"salt")
    error = refused.value.args[0]
    assert error.code() == KafkaError.UNACCEPTABLE_CREDENTIAL and error.str() == message


def test_the_edges_of_kafkas_range_are_accepted(server: ServerProcess) -> None:
    from confluent_kafka.admin import ScramMechanism

    for iterations in (4096, 16384):
        upsert(server, f"edge-{iterations}", ScramMechanism.SCRAM_SHA_512, iterations, b"salt")
        assert kafka_login(server, "SCRAM-SHA-512", f"edge-{iterations}", "short-salt-secret")

