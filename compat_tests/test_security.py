"""Secured Kafka listeners against the real clients: one server with five listeners configured by
Kafka's property names in a ``server.properties`` (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL, and MTLS:
SSL with required client certificates), certificates made by a test CA (trustme) at set-up.

confluent-kafka (librdkafka), kafka-python, kcat and Java kafka-clients 3.9 / 4.x each authenticate
with PLAIN and SCRAM-SHA-256/512 and over TLS, and are refused with a wrong password. The SCRAM users
are made at start (``--add-scram``) and through the Admin API (AlterUserScramCredentials). A raw socket
shows what a stranger gets: a request before authentication, or a frame over the pre-authentication
limit, closes its connection, and the server goes on serving everyone else."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.java_support import VERSIONS, run_main
from tests.server_process import ServerProcess, add_scram_args, config_args
from tests.tls_files import librdkafka_refusal, librdkafka_roundtrip, make_certificates

pytestmark = pytest.mark.timeout(180)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}  # PLAIN, from the JAAS configuration
SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"  # SCRAM-SHA-256 and -512, from --add-scram
LISTENERS = ("SASL_PLAINTEXT", "SSL", "SASL_SSL", "MTLS")


class Secured:
    """The running server and the files clients need (the CA, a client certificate for ``alice``)."""

    def __init__(self, server: ServerProcess, ca: Path, client_cert: Path, client_key: Path) -> None:
        self.server, self.ca, self.client_cert, self.client_key = server, ca, client_cert, client_key

    def bootstrap(self, listener: str) -> str:
        name = "kafka" if listener == "PLAINTEXT" else f"kafka:{listener}"
        return f"127.0.0.1:{self.server.ports[name]}"

    def librdkafka(self, listener: str, mechanism: str | None = None, user: str = SCRAM_USER,
                   password: str = SCRAM_PASSWORD, certificate: bool = False) -> dict[str, Any]:
        """librdkafka's settings for ``listener`` (as confluent-kafka and kcat take them)."""
        protocol = "SSL" if listener == "MTLS" else listener
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": protocol}
        if mechanism is not None:
            conf |= {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        if "SSL" in protocol:
            conf["ssl.ca.location"] = str(self.ca)
        if certificate:
            conf |= {"ssl.certificate.location": str(self.client_cert), "ssl.key.location": str(self.client_key)}
        return conf


def _jaas(module: str, options: str = "") -> str:
    return f"org.apache.kafka.common.security.{module} required {options};"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("secured")
    certificates = make_certificates(home)
    server_pem, ca_pem = certificates.server_pem, certificates.ca_pem
    client_cert, client_key = certificates.client("alice", "alice")
    plain = _jaas("plain.PlainLoginModule", " ".join(f'user_{u}="{p}"' for u, p in USERS.items()))
    scram = _jaas("scram.ScramLoginModule")
    lines = [
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
        "SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,"
        "SASL_SSL:SASL_SSL,MTLS:SSL",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={ca_pem}",
        "listener.name.mtls.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
    ]
    for listener in ("sasl_plaintext", "sasl_ssl"):
        lines += [f"listener.name.{listener}.plain.sasl.jaas.config={plain}",
                  f"listener.name.{listener}.scram-sha-256.sasl.jaas.config={scram}",
                  f"listener.name.{listener}.scram-sha-512.sasl.jaas.config={scram}"]
    properties = home / "server.properties"
    properties.write_text("\n".join(lines) + "\n")
    server = ServerProcess(str(home / "data"), "--config", str(properties), "--log-level", "INFO",
                           *add_scram_args(home, f"SCRAM-SHA-256=[name={SCRAM_USER},password={SCRAM_PASSWORD}]",
                                           f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]")).start()
    try:
        assert all(f"kafka:{name}" in server.ports for name in LISTENERS), server.output
        yield Secured(server, ca_pem, client_cert, client_key)
        assert server.proc is not None and server.proc.poll() is None, "".join(server.output[-100:])
        assert not any(s in line for line in server.output for s in (*USERS.values(), SCRAM_PASSWORD)), \
            "a password reached the server's log"
        assert server.stop(timeout=30) == 0
    finally:
        server.kill()


def _topic() -> str:
    return f"secured-{uuid.uuid4().hex[:10]}"






@pytest.mark.parametrize(("listener", "mechanism", "user", "password", "certificate"), [
    ("SASL_PLAINTEXT", "PLAIN", "alice", USERS["alice"], False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD, False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD, False),
    ("SASL_SSL", "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD, False),
    ("SASL_SSL", "PLAIN", "bob", USERS["bob"], False),
    ("SSL", None, "", "", False),
    ("MTLS", None, "", "", True),
])
def test_confluent_kafka_authenticates(secured: Secured, listener: str, mechanism: str | None, user: str,
                                       password: str, certificate: bool) -> None:
    conf = secured.librdkafka(listener, mechanism, user, password, certificate)
    assert librdkafka_roundtrip(conf, _topic()) == [b"v0", b"v1", b"v2"]


def test_requests_after_authentication_may_exceed_the_pre_authentication_limit(secured: Secured) -> None:
    """The 512 KiB limit holds only until the exchange succeeds: the very next frame may be a 1.5 MB
    produce (the limit is lifted when the session authenticates, not at the next request)."""
    from confluent_kafka import Consumer, Producer

    conf = secured.librdkafka("SASL_PLAINTEXT", "PLAIN", "alice", USERS["alice"])
    topic, big = _topic(), b"m" * 1_500_000
    producer = Producer({**conf, "message.max.bytes": 4_000_000, "enable.idempotence": True})
    errors: list[Any] = []
    producer.produce(topic, big, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(30) == 0 and errors == [None]
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "fetch.message.max.bytes": 4_000_000})
    consumer.subscribe([topic])
    deadline, got = time.monotonic() + 30, None
    while got is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg.value()
    consumer.close()
    assert got == big


@pytest.mark.parametrize(("listener", "mechanism", "user"), [
    ("SASL_PLAINTEXT", "PLAIN", "alice"), ("SASL_PLAINTEXT", "SCRAM-SHA-256", SCRAM_USER),
    ("SASL_SSL", "SCRAM-SHA-512", SCRAM_USER), ("SASL_PLAINTEXT", "SCRAM-SHA-256", "nobody")])
def test_confluent_kafka_with_a_wrong_password_islibrdkafka_refusal(secured: Secured, listener: str, mechanism: str,
                                                           user: str) -> None:
    seen = librdkafka_refusal(secured.librdkafka(listener, mechanism, user, "not-the-password"))
    # Kafka's message for the mechanism, whatever was wrong: an unknown user reads like a wrong password.
    expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN" else
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")
    assert expected in seen, seen


def test_a_mechanism_the_listener_does_not_enable_islibrdkafka_refusal(secured: Secured) -> None:
    seen = librdkafka_refusal(secured.librdkafka("SASL_PLAINTEXT", "OAUTHBEARER") | {
        "sasl.oauthbearer.config": "principal=alice", "enable.sasl.oauthbearer.unsecure.jwt": True})
    assert "OAUTHBEARER" in seen and "PLAIN" in seen, seen  # librdkafka names the server's mechanisms


def test_mtls_without_a_client_certificate_islibrdkafka_refusal(secured: Secured) -> None:
    seen = librdkafka_refusal(secured.librdkafka("MTLS"))
    assert "SSL" in seen or "handshake" in seen.lower() or "Disconnected" in seen, seen


def test_metadata_advertises_the_listener_the_client_came_in_on(secured: Secured) -> None:
    from confluent_kafka.admin import AdminClient

    for listener in LISTENERS:
        conf = secured.librdkafka(listener, "SCRAM-SHA-256" if "SASL" in listener else None,
                                  certificate=listener == "MTLS")
        brokers = AdminClient(conf).list_topics(timeout=20).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [secured.bootstrap(listener)]


def test_kafka_python_over_sasl_and_tls(secured: Secured) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError

    cases: list[dict[str, Any]] = [
        {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
         "sasl_plain_password": USERS["alice"]},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": SCRAM_USER,
         "sasl_plain_password": SCRAM_PASSWORD, "ssl_cafile": str(secured.ca)},
        {"security_protocol": "SSL", "ssl_cafile": str(secured.ca), "ssl_certfile": str(secured.client_cert),
         "ssl_keyfile": str(secured.client_key), "listener": "MTLS"},
    ]
    for case in cases:
        listener = case.pop("listener", case["security_protocol"])
        topic = _topic()
        producer = KafkaProducer(bootstrap_servers=secured.bootstrap(listener), **case)
        for i in range(3):
            producer.send(topic, f"v{i}".encode()).get(30)
        producer.close()
        consumer = KafkaConsumer(topic, bootstrap_servers=secured.bootstrap(listener), auto_offset_reset="earliest",
                                 **case)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        consumer.close()
        assert got == [b"v0", b"v1", b"v2"], case
    wrong = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
             "sasl_plain_username": SCRAM_USER, "sasl_plain_password": "wrong"}
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=secured.bootstrap("SASL_PLAINTEXT"), bootstrap_timeout_ms=3000,
                      **wrong).send("never", b"x").get(15)
    assert any(f"wrong password for user '{SCRAM_USER}'" in line for line in secured.server.output)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/bootstrap.sh installs it)")
def test_kcat_over_sasl_ssl(secured: Secured) -> None:
    conf = secured.librdkafka("SASL_SSL", "SCRAM-SHA-512")
    options = [arg for key, value in conf.items() if key != "bootstrap.servers" for arg in ("-X", f"{key}={value}")]
    topic = _topic()
    kcat = [shutil.which("kcat") or "kcat", "-b", conf["bootstrap.servers"], *options]
    produced = subprocess.run([*kcat, "-P", "-t", topic], input="one\ntwo\n", text=True, capture_output=True,
                              timeout=60)
    assert produced.returncode == 0, produced.stderr
    out = subprocess.run([*kcat, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert out.split() == ["one", "two"]
    wrong = [arg.replace(SCRAM_PASSWORD, "wrong") for arg in kcat]
    refused = subprocess.run([*wrong, "-L", "-m", "5"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "Authentication failed" in refused.stderr, refused.stderr


def test_admin_api_makes_scram_users_that_can_log_in(secured: Secured) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(secured.librdkafka("SASL_PLAINTEXT", "SCRAM-SHA-256"))
    upsert = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"dave-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    infos = admin.describe_user_scram_credentials(["dave"])["dave"].result(30).scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    dave = secured.librdkafka("SASL_PLAINTEXT", "SCRAM-SHA-256", "dave", "dave-secret")
    assert librdkafka_roundtrip(dave, _topic()) == [b"v0", b"v1", b"v2"]
    too_few = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"x")
    with pytest.raises(Exception, match="iterations"):
        next(iter(admin.alter_user_scram_credentials([too_few]).values())).result(30)
    deletion = UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(30)
    assert "Authentication failed" in librdkafka_refusal(dave)


@pytest.mark.parametrize("version", VERSIONS)
def test_java_clients_over_sasl_ssl_and_mtls(secured: Secured, version: str, tmp_path: Path) -> None:
    sasl = ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";',
            "ssl.truststore.type=PEM", f"ssl.truststore.location={secured.ca}"]
    topic = _topic()
    run = run_main(version, "SecurityClient", [secured.bootstrap("SASL_SSL"), topic, "roundtrip", *sasl], 120)
    assert [e["value"] for e in run.of("roundtrip", "consumed")] == ["v0", "v1", "v2"]
    user = f"java{version.replace('.', '')}"
    run = run_main(version, "SecurityClient", [secured.bootstrap("SASL_SSL"), topic, "add_user", *sasl, user,
                                                f"{user}-secret"], 120)
    assert [(e["mechanism"], e["iterations"]) for e in run.of("add_user", "credential")] == [("SCRAM-SHA-512", 8192)]
    wrong = [s.replace(SCRAM_PASSWORD, "wrong") for s in sasl]
    run = run_main(version, "SecurityClient", [secured.bootstrap("SASL_SSL"), topic, "refused", *wrong], 120)
    assert [e["exception"] for e in run.of("refused", "refused")] == ["SaslAuthenticationException"]
    # mTLS: the client's key (PKCS#8, as Java's PEM key stores take it) and certificate in one PEM key
    # store, the CA in a PEM trust store.
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(secured.client_key.read_bytes(), None)
    pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    keystore = tmp_path / "alice-keystore.pem"
    keystore.write_bytes(pkcs8 + secured.client_cert.read_bytes())
    mtls = ["security.protocol=SSL", "ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}",
            "ssl.truststore.type=PEM", f"ssl.truststore.location={secured.ca}"]
    run = run_main(version, "SecurityClient", [secured.bootstrap("MTLS"), _topic(), "roundtrip", *mtls], 120)
    assert len(run.of("roundtrip", "consumed")) == 3


def _frame(api_key: int, version: int, body: bytes = b"", correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, len(b"raw")) + b"raw"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (reads EOF or a reset within a few seconds)."""
    sock.settimeout(5)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_strangers_before_authentication_are_closed_and_others_served(secured: Secured) -> None:
    host, port = secured.bootstrap("SASL_PLAINTEXT").split(":")
    metadata_v1_all_topics = struct.pack(">i", -1)
    with socket.create_connection((host, int(port))) as sock:  # Metadata before authenticating
        sock.sendall(_frame(3, 1, metadata_v1_all_topics))
        assert _closed(sock)
    with socket.create_connection((host, int(port))) as sock:  # a frame over the pre-authentication limit
        sock.sendall(struct.pack(">i", 64 * 1024 * 1024) + b"\0" * 1024)
        assert _closed(sock)
    with socket.create_connection((host, int(port))) as sock:  # SaslAuthenticate before SaslHandshake
        sock.sendall(_frame(36, 1, struct.pack(">i", 4) + b"\0x\0y"))
        sock.settimeout(5)
        answer = sock.recv(65536)
        (size, correlation_id, error) = struct.unpack(">iih", answer[:10])
        assert (correlation_id, error) == (7, 34)  # ILLEGAL_SASL_STATE
        assert _closed(sock)
    # ApiVersions is answered before authentication (clients ask it first).
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(_frame(18, 0))
        sock.settimeout(5)
        assert struct.unpack(">iih", sock.recv(65536)[:10])[1:] == (7, 0)
    assert librdkafka_roundtrip(secured.librdkafka("SASL_PLAINTEXT", "PLAIN", "alice", USERS["alice"]), _topic()) == \
        [b"v0", b"v1", b"v2"]


# Re-authentication (KIP-368), SaslHandshake v0 and max.connections.per.ip, on a server of their own.

REAUTH_MS = 3000


def test_refused_tls_clients_are_disconnected(secured: Secured) -> None:
    """Over TLS too, a refusal ends the connection: a failed SASL exchange, and a request before
    authentication, on SASL_SSL (Twisted's TLS transport closes only once the connection is no longer its
    producer; until the connection unregistered itself, such connections stayed open)."""
    import ssl

    host, port = secured.bootstrap("SASL_SSL").split(":")
    context = ssl.create_default_context(cafile=str(secured.ca))

    def tls() -> ssl.SSLSocket:
        return context.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)

    with tls() as sock:  # SaslHandshake PLAIN, then a wrong password
        sock.sendall(_frame(17, 1, struct.pack(">h", 5) + b"PLAIN"))
        sock.settimeout(5)
        assert struct.unpack(">iih", sock.recv(65536)[:10])[1:] == (7, 0)
        token = b"\0alice\0not-the-password"
        sock.sendall(_frame(36, 1, struct.pack(">i", len(token)) + token))
        assert _closed(sock)
    with tls() as sock:  # Metadata before authenticating
        sock.sendall(_frame(3, 1, struct.pack(">i", -1)))
        assert _closed(sock)


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SASL_PLAINTEXT server whose sessions last ``REAUTH_MS`` and that takes 3 connections per address;
    its bootstrap address."""
    home = tmp_path_factory.mktemp("reauth")
    plain = _jaas("plain.PlainLoginModule", " ".join(f'user_{u}="{p}"' for u, p in USERS.items()))
    server = ServerProcess(str(home / "data"), "--override", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
                           "--override", "sasl.enabled.mechanisms=PLAIN",
                           *config_args(home, f"listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}"),
                           "--override", f"connections.max.reauth.ms={REAUTH_MS}", "--override", "max.connections.per.ip=3").start()
    try:
        yield f"127.0.0.1:{server.ports['kafka']}"
        assert server.stop(timeout=30) == 0
    finally:
        server.kill()


class RawClient:
    """A socket speaking just enough of the protocol to walk through SASL by hand."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        self.sock.sendall(_frame(api_key, version, body, self.correlation))
        return self.answer()[4:]  # the correlation id checked by the caller's decoding of the body

    def answer(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return data

    def handshake(self, mechanism: str = "PLAIN", version: int = 1) -> int:
        body = struct.pack(">h", len(mechanism)) + mechanism.encode()
        return struct.unpack(">h", self.call(17, version, body)[:2])[0]

    def authenticate(self, user: str, password: str) -> tuple[int, int]:
        """SaslAuthenticate v1 with a PLAIN message: (error code, session lifetime in ms)."""
        token = f"\0{user}\0{password}".encode()
        body = self.call(36, 1, struct.pack(">i", len(token)) + token)
        error, message_len = struct.unpack(">hh", body[:4])
        at = 4 + max(message_len, 0)
        (auth_len,) = struct.unpack(">i", body[at:at + 4])
        return error, struct.unpack(">q", body[at + 4 + auth_len:at + 12 + auth_len])[0]

    def metadata(self) -> bool:
        """Whether a Metadata v1 request is answered (False: the connection was closed)."""
        try:
            self.call(3, 1, struct.pack(">i", 0))
            return True
        except (ConnectionError, OSError):
            return False

    def close(self) -> None:
        self.sock.close()


def test_sessions_end_unless_reauthenticated_as_the_same_principal(short_sessions: str) -> None:
    client = RawClient(short_sessions)
    assert client.handshake() == 0
    assert client.authenticate("alice", USERS["alice"]) == (0, REAUTH_MS)
    assert client.metadata()
    time.sleep(REAUTH_MS / 2000)
    assert client.handshake() == 0 and client.authenticate("alice", USERS["alice"]) == (0, REAUTH_MS)
    time.sleep(REAUTH_MS / 1000 * 0.7)  # past the first session's end, inside the renewed one
    assert client.metadata()
    assert client.handshake() == 0
    assert client.authenticate("bob", USERS["bob"])[0] == 58  # another principal: SASL_AUTHENTICATION_FAILED
    assert _closed(client.sock)
    client = RawClient(short_sessions)
    assert client.handshake() == 0 and client.authenticate("alice", USERS["alice"])[0] == 0
    time.sleep(REAUTH_MS / 1000 + 0.5)
    assert not client.metadata()  # expired without re-authenticating: closed


def test_librdkafka_reauthenticates_and_keeps_producing(short_sessions: str) -> None:
    from confluent_kafka import Producer

    seen: list[str] = []
    producer = Producer({"bootstrap.servers": short_sessions, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": USERS["alice"],
                         "enable.idempotence": True, "error_cb": lambda e: seen.append(e.str())})
    delivered: list[Any] = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    topic = _topic()
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda e, _m: delivered.append(e))
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert delivered and all(e is None for e in delivered), [e for e in delivered if e is not None][:3]
    assert not seen, seen


def test_saslhandshake_v0_then_bare_tokens(short_sessions: str) -> None:
    client = RawClient(short_sessions)
    assert client.handshake(version=0) == 0
    token = f"\0alice\0{USERS['alice']}".encode()
    client.sock.sendall(struct.pack(">i", len(token)) + token)
    assert client.answer() == b""  # PLAIN's empty answer, as a bare frame
    assert client.metadata()
    client.close()
    client = RawClient(short_sessions)
    assert client.handshake(version=0) == 0
    client.sock.sendall(struct.pack(">i", 12) + b"\0alice\0wrong")
    assert _closed(client.sock)  # v0 has no error answer: the connection closes


def test_connections_per_address_are_capped(short_sessions: str) -> None:
    clients = [RawClient(short_sessions) for _ in range(3)]
    assert all(c.handshake() == 0 for c in clients)
    fourth = RawClient(short_sessions)
    assert _closed(fourth.sock)
    clients.pop().close()
    time.sleep(0.5)
    again = RawClient(short_sessions)
    assert again.handshake() == 0
    for c in [*clients, again]:
        c.close()
