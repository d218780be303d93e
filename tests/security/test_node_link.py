"""How cluster nodes reach each other's Kafka listeners: ``node_link`` reads Kafka's inter-broker
properties (and refuses ones a node could not log in with), ``SaslClient`` speaks PLAIN and SCRAM to the
server's own mechanisms, and ``cluster up --config`` gives each node its listeners on ports of its own.
``native_link``: the same login on the other nodes' native listener, refused by name where it cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from millrace.gateway.commands.local_cluster import ClusterSettings
from millrace.gateway.native.forwarding import NativeLink
from millrace.gateway.security.properties import ConfigError, native_listener_settings, security_settings
from millrace.gateway.security.sasl import (
    InMemoryCredentialStore,
    SaslAuthenticationError,
    sasl_server,
    scram_credential,
)
from millrace.gateway.security.sasl_client import SaslLogin
from millrace.gateway.shared.assembly import native_link, node_link
from millrace.protocol.sasl import SaslClient, SaslClientError

trustme = pytest.importorskip("trustme")

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


def _sasl(**extra: str) -> dict[str, str]:
    return {"listeners": "INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0",
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CLIENT:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.internal.plain.sasl.jaas.config": f'{PLAIN} user_a="b";',
            "listener.name.internal.scram-sha-256.sasl.jaas.config": f"{SCRAM};", **extra}


def test_the_default_is_the_plaintext_listener_without_login() -> None:
    link = node_link(security_settings({"listeners": "PLAINTEXT://127.0.0.1:0"}))
    assert (link.listener, link.tls, link.sasl) == ("PLAINTEXT", None, None)


def test_a_named_sasl_listener_logs_in_with_its_jaas_username_and_password() -> None:
    link = node_link(security_settings(_sasl(**{
        "inter.broker.listener.name": "internal", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.internal.scram-sha-256.sasl.jaas.config": f'{SCRAM} username="node" password="pw";'})))
    assert link.listener == "INTERNAL" and link.sasl == SaslLogin("SCRAM-SHA-256", "node", "pw")
    assert "pw" not in repr(link)


@pytest.mark.parametrize(("props", "named"), [
    ({"listeners": "SASL_SSL://127.0.0.1:0"}, "security.inter.broker.protocol"),  # no listener named PLAINTEXT
    (_sasl(**{"inter.broker.listener.name": "INTERNAL"}), "sasl.mechanism.inter.broker.protocol"),
    (_sasl(**{"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "GSSAPI"}),
     "sasl.mechanism.inter.broker.protocol"),
    (_sasl(**{"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "PLAIN"}),
     "listener.name.internal.plain.sasl.jaas.config"),
])
def test_an_inter_broker_login_a_node_cannot_make_is_refused_by_name(props: dict[str, str], named: str,
                                                                      tmp_path: Path) -> None:
    if props["listeners"].startswith("SASL_SSL"):
        pem = tmp_path / "node.pem"
        trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
        props = {**props, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem),
                 "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{PLAIN} user_a="b";',
                 "sasl.enabled.mechanisms": "PLAIN"}
    with pytest.raises(ConfigError) as caught:
        node_link(security_settings(props))
    assert caught.value.prop == named


def test_a_tls_inter_broker_listener_checks_certificates_with_its_trust_store(tmp_path: Path) -> None:
    pem = tmp_path / "node.pem"
    trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    props = {"listeners": "SSL://127.0.0.1:0", "inter.broker.listener.name": "SSL",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem)}
    assert node_link(security_settings(props)).tls is not None  # the system's CAs, as Kafka falls back to the JVM's
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="trust store"):
        node_link(security_settings({**props, "ssl.truststore.type": "PEM",
                                     "ssl.truststore.location": str(tmp_path / "empty.pem")}))
    ca_pem = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca_pem))
    link = node_link(security_settings({**props, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_pem)}))
    assert link.tls is not None and link.tls("127.0.0.1") is not None


def _exchange(login: SaslLogin, store: InMemoryCredentialStore) -> None:
    server = sasl_server(login.mechanism, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], store)
    client = login.client()
    message: bytes | None = client.first()
    while message is not None:
        message = client.answer(server.step(message))
    assert server.complete


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_client_logs_in_to_the_servers_own_mechanisms(mechanism: str) -> None:
    store = InMemoryCredentialStore({"node": "right"})
    if mechanism != "PLAIN":
        store.set_scram("node", mechanism, scram_credential(mechanism, "right", iterations=4096))
    _exchange(SaslLogin(mechanism, "node", "right"), store)
    with pytest.raises(SaslAuthenticationError):
        _exchange(SaslLogin(mechanism, "node", "wrong"), store)


def test_a_scram_server_that_does_not_know_the_password_is_not_believed() -> None:
    store = InMemoryCredentialStore()
    store.set_scram("node", "SCRAM-SHA-256", scram_credential("SCRAM-SHA-256", "right", iterations=4096))
    server = sasl_server("SCRAM-SHA-256", ["SCRAM-SHA-256"], store)
    client = SaslLogin("SCRAM-SHA-256", "node", "right").client()
    server.step(client.answer(server.step(client.first())) or b"")
    with pytest.raises(SaslClientError):
        client.answer(b"v=" + b"A" * 44)  # a server signature made without the password


def test_a_scram_server_that_ends_the_exchange_early_is_not_believed() -> None:
    """A server saying "complete" before its final message proved it knows the credential (the native
    AUTHENTICATE's ``complete``) is refused, as one whose proof is wrong."""
    client = SaslClient("SCRAM-SHA-512", "node", "right")
    client.first()
    with pytest.raises(SaslClientError, match="before proving"):
        client.done(b"")
    assert "right" not in repr(client)


def test_cluster_up_gives_each_node_its_listeners_on_its_own_ports(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("listeners=INTERNAL://127.0.0.1:9093,CLIENT://:9092\n"
                      "advertised.listeners=CLIENT://kafka.example:9092\n"
                      "listener.security.protocol.map=INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT\n"
                      "inter.broker.listener.name=INTERNAL\n")
    settings = ClusterSettings(config=str(config), overrides=["max.connections.per.ip=50"])
    assert settings.kafka_listener_names() == ["INTERNAL", "CLIENT"]
    args = settings.kafka_overrides({"kafka": 4001, "kafka:CLIENT": 4002})
    assert args == ["--config", str(config), "--override", "max.connections.per.ip=50",
                    "--override", "listeners=INTERNAL://127.0.0.1:4001,CLIENT://127.0.0.1:4002",
                    "--override", "advertised.listeners="]
    assert ClusterSettings().kafka_overrides({"kafka": 1}) == []


# -- the native link: how a node logs in to the others' native listener -----------------------------------
def _native(**extra: str) -> dict[str, str]:
    """A SASL inter-broker login as ``node``, and a SASL_PLAINTEXT native listener."""
    return _sasl(**{"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    "listener.name.internal.plain.sasl.jaas.config": f'{PLAIN} username="node" password="pw" '
                                                                     'user_node="pw";',
                    "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CLIENT:PLAINTEXT,NATIVE:SASL_PLAINTEXT",
                    "listener.name.native.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                    "listener.name.native.plain.sasl.jaas.config": f'{PLAIN} user_node="pw" user_alice="x";',
                    "listener.name.native.scram-sha-512.sasl.jaas.config": f"{SCRAM};",
                    "super.users": "User:node", **extra})


def _native_link(props: dict[str, str]) -> NativeLink:

    security = security_settings(props)
    return native_link(security, native_listener_settings(props, "127.0.0.1", 0), node_link(security))


def test_a_node_logs_in_to_the_native_listener_as_the_inter_broker_user() -> None:
    link = _native_link(_native())
    assert link.login == SaslLogin("PLAIN", "node", "pw") and link.tls is None
    plain = _native_link({"listeners": "PLAINTEXT://127.0.0.1:0"})
    assert (plain.login, plain.tls) == (None, None)


@pytest.mark.parametrize(("change", "named"), [
    ({"listener.name.native.sasl.enabled.mechanisms": "SCRAM-SHA-512"}, "listener.name.native.sasl.enabled.mechanisms"),
    ({"listener.name.native.plain.sasl.jaas.config": f'{PLAIN} user_alice="x";'},
     "listener.name.native.plain.sasl.jaas.config"),
    ({"super.users": "User:alice"}, "super.users"),
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT,NATIVE:SASL_PLAINTEXT"},
     "listener.security.protocol.map"),
])
def test_a_native_login_a_node_cannot_make_is_refused_by_name(change: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _native_link(_native(**change))
    assert named in str(refused.value)
    assert "pw" not in str(refused.value)
