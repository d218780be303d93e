"""SASL/OAUTHBEARER against the real clients: one server with a SASL_PLAINTEXT and a SASL_SSL listener
configured for OAUTHBEARER by Kafka's property names (OAuthBearerValidatorCallbackHandler, a JWKS
``file:`` URL, expected audience and issuer), its keys made at set-up with ``cryptography`` and its JWKS
written to a temporary file.

A tiny identity provider runs in the test (``http.server``): a client-credentials token endpoint issuing
signed JWTs, the subject being the client id. Clients: confluent-kafka (librdkafka) with ``oauth_cb`` and
with its own OIDC login against the endpoint, kafka-python with ``sasl_oauth_token_provider``, Java
kafka-clients 3.9 and 4.x with OAuthBearerLoginCallbackHandler against the endpoint, kcat where its
librdkafka was built with OIDC. Tokens signed by another key, expired, or for another audience are refused
by each with an authentication error; a session whose token expires is closed unless the client
re-authenticates with a fresh one, which librdkafka does."""

from __future__ import annotations

import base64
import json
import logging
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from compat_tests.java_support import VERSIONS, oauth_jars, run_main
from tests.server_process import ServerProcess
from tests.tls_files import librdkafka_refusal, librdkafka_roundtrip, make_certificates

jwt = pytest.importorskip("jwt")
pytestmark = pytest.mark.timeout(180)

AUDIENCE, ISSUER = "millrace", "https://idp.millrace.test"
JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LISTENERS = ("SASL_PLAINTEXT", "SASL_SSL")
# What the token endpoint issues for each client id (the client secret is "<id>-secret").
KINDS = ("good", "badsig", "expired", "wrongaud")


class IdentityProvider:
    """The test's signing keys, and the tokens it issues (every token kept, so the server's log can be
    checked for them)."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.rogue = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # not in the JWKS
        self.issued: list[str] = []
        self._lock = threading.Lock()

    def jwks(self) -> str:
        entry = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return json.dumps({"keys": [entry | {"kid": "k1", "use": "sig", "alg": "RS256"}]})

    def token(self, subject: str, kind: str = "good", lifetime: float = 600) -> tuple[str, float]:
        """A token for ``subject`` and its expiry (seconds since the epoch)."""
        now = time.time()
        exp = now - 600 if kind == "expired" else now + lifetime
        claims = {"sub": subject, "iss": ISSUER, "aud": "someone-else" if kind == "wrongaud" else AUDIENCE,
                  "iat": int(now) - (900 if kind == "expired" else 0), "exp": int(exp), "scope": "kafka"}
        token = jwt.encode(claims, self.rogue if kind == "badsig" else self.key, algorithm="RS256",
                           headers={"kid": "k1"})
        with self._lock:
            self.issued.append(token)
        return token, int(exp)


def serve_token_endpoint(idp: IdentityProvider) -> ThreadingHTTPServer:
    """An OAuth 2 client-credentials token endpoint (RFC 6749 4.4) at /token on a free port."""

    class TokenHandler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
            client_id, secret = form.get("client_id", [""])[0], form.get("client_secret", [""])[0]
            basic = self.headers.get("Authorization", "")
            if basic.startswith("Basic "):
                user, _, password = base64.b64decode(basic[6:]).decode().partition(":")
                client_id, secret = urllib.parse.unquote(user), urllib.parse.unquote(password)
            if (self.path != "/token" or form.get("grant_type") != ["client_credentials"]
                    or secret != f"{client_id}-secret"):
                self._answer(401, {"error": "invalid_client"})
                return
            kind = client_id.split("-", 1)[0]
            token, exp = idp.token(client_id, kind if kind in KINDS else "good")
            self._answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": max(1, exp - int(time.time())),
                               "scope": "kafka"})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), TokenHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class OAuthServer:
    def __init__(self, server: ServerProcess, idp: IdentityProvider, ca: Path, token_url: str) -> None:
        self.server, self.idp, self.ca, self.token_url = server, idp, ca, token_url

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.server.ports['kafka' if listener == LISTENERS[0] else f'kafka:{listener}']}"

    def librdkafka(self, listener: str, kind: str = "good", lifetime: float = 600,
                   calls: list[float] | None = None) -> dict[str, Any]:
        """confluent-kafka's settings, the token coming from ``oauth_cb`` (each call noted in ``calls``)."""
        subject = f"{kind}-rdkafka"

        def oauth_cb(_config: str) -> tuple[str, float]:
            if calls is not None:
                calls.append(time.monotonic())
            token, exp = self.idp.token(subject, kind, lifetime)
            # librdkafka will not send a token it knows to be expired: it is told a later expiry, so the
            # server has to find out from the token itself.
            return token, exp if kind != "expired" else time.time() + 600

        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": listener,
                                "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
        if listener == "SASL_SSL":
            conf["ssl.ca.location"] = str(self.ca)
        return conf


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthServer]:
    home = tmp_path_factory.mktemp("oauth")
    idp = IdentityProvider()
    jwks = home / "jwks.json"
    jwks.write_text(idp.jwks())
    certificates = make_certificates(home)
    server_pem, ca_pem = certificates.server_pem, certificates.ca_pem
    lines = [
        "listeners=SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
        # The plain listener names its JWKS with its own prefix, the TLS one takes the broker-wide one.
        f"listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url=file://{jwks}",
        f"sasl.oauthbearer.jwks.endpoint.url=file:{jwks}",
        f"sasl.oauthbearer.expected.audience={AUDIENCE}",
        f"sasl.oauthbearer.expected.issuer={ISSUER}",
    ]
    for listener in ("sasl_plaintext", "sasl_ssl"):
        lines += [f"listener.name.{listener}.oauthbearer.sasl.jaas.config={JAAS}",
                  f"listener.name.{listener}.oauthbearer.sasl.server.callback.handler.class={VALIDATOR}"]
    properties = home / "server.properties"
    properties.write_text("\n".join(lines) + "\n")
    endpoint = serve_token_endpoint(idp)
    server = ServerProcess(str(home / "data"), "--config", str(properties), "--log-level", "INFO").start()
    try:
        assert "kafka:SASL_SSL" in server.ports, server.output
        yield OAuthServer(server, idp, ca_pem, f"http://127.0.0.1:{endpoint.server_address[1]}/token")
        assert server.proc is not None and server.proc.poll() is None, "".join(server.output[-100:])
        signatures = [token.split(".")[2][:24] for token in idp.issued]
        assert not any(part in line for line in server.output for part in signatures), "a token reached the log"
        assert server.stop(timeout=30) == 0
    finally:
        server.kill()
        endpoint.shutdown()


def _topic() -> str:
    return f"oauth-{uuid.uuid4().hex[:10]}"






@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent_kafka_with_oauth_cb_produces_and_consumes(oauth: OAuthServer, listener: str) -> None:
    assert librdkafka_roundtrip(oauth.librdkafka(listener), _topic()) == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize(("listener", "kind"), [
    ("SASL_PLAINTEXT", "badsig"), ("SASL_PLAINTEXT", "expired"), ("SASL_SSL", "wrongaud")])
def test_confluent_kafka_with_a_wrong_token_islibrdkafka_refusal(oauth: OAuthServer, listener: str, kind: str) -> None:
    seen = librdkafka_refusal(oauth.librdkafka(listener, kind))
    # librdkafka reports the SASL failure with Kafka's message for it, the error challenge.
    assert "invalid_token" in seen and "SASL" in seen, seen


def _oidc_support() -> bool:
    from confluent_kafka import Producer

    try:
        Producer({"sasl.oauthbearer.method": "oidc"})
    except Exception as e:  # noqa: BLE001 - the build says it has no OIDC
        return "not supported in this build" not in str(e)
    return True


def test_confluent_kafka_oidc_login_against_the_token_endpoint(oauth: OAuthServer) -> None:
    """librdkafka's own client-credentials login (sasl.oauthbearer.method=oidc), as kcat would use it."""
    if not _oidc_support():
        pytest.skip("this librdkafka was built without OIDC (libcurl)")
    conf = {"bootstrap.servers": oauth.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "good-oidc", "sasl.oauthbearer.client.secret": "good-oidc-secret",
            "sasl.oauthbearer.token.endpoint.url": oauth.token_url, "sasl.oauthbearer.scope": "kafka"}
    assert librdkafka_roundtrip(conf, _topic()) == [b"v0", b"v1", b"v2"]
    wrong = conf | {"sasl.oauthbearer.client.id": "wrongaud-oidc", "sasl.oauthbearer.client.secret": "wrongaud-oidc-secret"}
    assert "invalid_token" in librdkafka_refusal(wrong)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/bootstrap.sh installs it)")
def test_kcat_oidc_login(oauth: OAuthServer) -> None:
    kcat = [shutil.which("kcat") or "kcat", "-b", oauth.bootstrap("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
            "-X", f"ssl.ca.location={oauth.ca}", "-X", "sasl.mechanism=OAUTHBEARER",
            "-X", "sasl.oauthbearer.method=oidc", "-X", "sasl.oauthbearer.client.id=good-kcat",
            "-X", "sasl.oauthbearer.client.secret=good-kcat-secret",
            "-X", f"sasl.oauthbearer.token.endpoint.url={oauth.token_url}"]
    topic = _topic()
    produced = subprocess.run([*kcat, "-P", "-t", topic], input="one\ntwo\n", text=True, capture_output=True,
                              timeout=60)
    if "not supported in this build" in produced.stderr:
        pytest.skip("kcat's librdkafka was built without OIDC (libcurl): " + produced.stderr.strip()[:200])
    assert produced.returncode == 0, produced.stderr
    out = subprocess.run([*kcat, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert out.split() == ["one", "two"]
    wrong = [arg.replace("good-kcat", "badsig-kcat") for arg in kcat]
    refused = subprocess.run([*wrong, "-L", "-m", "5"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "invalid_token" in refused.stderr, refused.stderr


def _token_provider(idp: IdentityProvider, kind: str) -> Any:
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:  # kafka-python before 3.0
        from kafka.sasl.oauth import AbstractTokenProvider  # type: ignore[no-redef]

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return idp.token(f"{kind}-kafka-python", kind)[0]

    return Provider()


@pytest.mark.parametrize("listener", LISTENERS)
def test_kafka_python_with_a_token_provider(oauth: OAuthServer, listener: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError

    def conf(kind: str) -> dict[str, Any]:
        settings: dict[str, Any] = {"bootstrap_servers": oauth.bootstrap(listener), "security_protocol": listener,
                                    "sasl_mechanism": "OAUTHBEARER",
                                    "sasl_oauth_token_provider": _token_provider(oauth.idp, kind)}
        if listener == "SASL_SSL":
            settings["ssl_cafile"] = str(oauth.ca)
        return settings

    topic = _topic()
    producer = KafkaProducer(**conf("good"))
    for i in range(3):
        producer.send(topic, f"v{i}".encode()).get(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", **conf("good"))
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [r.value for r in records]
    consumer.close()
    assert got == [b"v0", b"v1", b"v2"]
    for kind in ("badsig", "expired", "wrongaud"):
        with pytest.raises(KafkaError):
            KafkaProducer(bootstrap_timeout_ms=3000, **conf(kind)).send("never", b"x").get(15)


@pytest.mark.parametrize("version", VERSIONS)
def test_java_clients_log_in_at_the_token_endpoint(oauth: OAuthServer, version: str) -> None:
    """OAuthBearerLoginCallbackHandler fetches a token with client credentials, as a Kafka client of an
    OAuth identity provider does; Kafka 4.x wants the endpoint allowed by a JVM system property."""
    jvm = [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={oauth.token_url}"]

    def props(client_id: str) -> list[str]:
        return ["security.protocol=SASL_SSL", "sasl.mechanism=OAUTHBEARER",
                "sasl.login.callback.handler.class="
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                f"sasl.oauthbearer.token.endpoint.url={oauth.token_url}",
                "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'clientId="{client_id}" clientSecret="{client_id}-secret" scope="kafka";',
                "ssl.truststore.type=PEM", f"ssl.truststore.location={oauth.ca}"]

    extra = [oauth_jars(version)]
    topic = _topic()
    run = run_main(version, "SecurityClient", [oauth.bootstrap("SASL_SSL"), topic, "roundtrip", *props("good-java")],
                   120, jvm, extra)
    assert [e["value"] for e in run.of("roundtrip", "consumed")] == ["v0", "v1", "v2"]
    for kind in ("badsig", "wrongaud"):
        run = run_main(version, "SecurityClient", [oauth.bootstrap("SASL_SSL"), topic, "refused",
                                                    *props(f"{kind}-java")], 120, jvm, extra)
        assert [e["exception"] for e in run.of("refused", "refused")] == ["SaslAuthenticationException"], kind


# Sessions bounded by the token (KIP-368).

def _frame(api_key: int, version: int, body: bytes, correlation_id: int) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, len(b"raw")) + b"raw"
    return struct.pack(">i", len(header) + len(body)) + header + body


class RawClient:
    """Just enough of the protocol to walk through SASL/OAUTHBEARER by hand."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        self.sock.sendall(_frame(api_key, version, body, self.correlation))
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)[4:]

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return data

    def handshake(self) -> int:
        return struct.unpack(">h", self.call(17, 1, struct.pack(">h", 11) + b"OAUTHBEARER")[:2])[0]

    def authenticate(self, message: bytes) -> tuple[int, str | None, bytes, int]:
        """SaslAuthenticate v1: (error code, error message, answer, session lifetime in ms)."""
        body = self.call(36, 1, struct.pack(">i", len(message)) + message)
        error, message_len = struct.unpack(">hh", body[:4])
        text = body[4:4 + message_len].decode() if message_len >= 0 else None
        at = 4 + max(message_len, 0)
        (auth_len,) = struct.unpack(">i", body[at:at + 4])
        answer = body[at + 4:at + 4 + auth_len]
        return error, text, answer, struct.unpack(">q", body[at + 4 + auth_len:at + 12 + auth_len])[0]

    def metadata(self) -> bool:
        try:
            self.call(3, 1, struct.pack(">i", 0))
            return True
        except (ConnectionError, OSError):
            return False


def _initial(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_the_error_challenge_then_authentication_failed(oauth: OAuthServer) -> None:
    client = RawClient(oauth.bootstrap("SASL_PLAINTEXT"))
    assert client.handshake() == 0
    token, _ = oauth.idp.token("mallory", "badsig")
    assert client.authenticate(_initial(token)) == (0, None, b'{"status":"invalid_token"}', 0)
    error, message, _, _ = client.authenticate(b"\x01")
    assert (error, message) == (58, '{"status":"invalid_token"}')  # SASL_AUTHENTICATION_FAILED
    assert not client.metadata()
    # The operator's log says which check failed (never with the token: the fixture checks every line).
    deadline = time.monotonic() + 5
    while not any("the token's signature does not verify" in line for line in oauth.server.output):
        assert time.monotonic() < deadline, "".join(oauth.server.output[-20:])
        time.sleep(0.1)


def test_a_session_ends_with_its_token(oauth: OAuthServer) -> None:
    client = RawClient(oauth.bootstrap("SASL_PLAINTEXT"))
    assert client.handshake() == 0
    token, exp = oauth.idp.token("alice", lifetime=3)
    error, _, answer, lifetime_ms = client.authenticate(_initial(token))
    assert (error, answer) == (0, b"") and 0 < lifetime_ms <= (exp - time.time()) * 1000 + 1000
    assert client.metadata()
    # Re-authenticating with a fresh token moves the end; another subject's token is refused.
    assert client.handshake() == 0
    fresh, _ = oauth.idp.token("alice", lifetime=4)
    assert client.authenticate(_initial(fresh))[:3] == (0, None, b"")
    assert client.handshake() == 0
    assert client.authenticate(_initial(oauth.idp.token("bob")[0]))[0] == 58
    client = RawClient(oauth.bootstrap("SASL_PLAINTEXT"))
    assert client.handshake() == 0
    token, exp = oauth.idp.token("alice", lifetime=2)
    assert client.authenticate(_initial(token))[0] == 0
    time.sleep(max(0.0, exp - time.time()) + 1)
    assert not client.metadata()  # its token expired and it did not re-authenticate: closed


def test_librdkafka_refreshes_its_token_and_reauthenticates(oauth: OAuthServer) -> None:
    """Tokens of 6 s, a producer for 14 s: librdkafka fetches new tokens (oauth_cb) and re-authenticates
    its connections with them before their sessions end (librdkafka's REAUTH in its debug log), and
    every record is delivered. A re-authentication that races the token refresh may get a short session
    and be disconnected (the server closes an ended session): the records are still delivered."""
    from confluent_kafka import Producer

    calls: list[float] = []
    debug = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:6]}")
    debug.propagate = False
    debug.setLevel(logging.DEBUG)
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    debug.addHandler(handler)
    producer = Producer({**oauth.librdkafka("SASL_PLAINTEXT", lifetime=6, calls=calls), "enable.idempotence": True,
                         "debug": "security", "logger": debug})
    delivered: list[Any] = []
    topic = _topic()
    deadline = time.monotonic() + 14
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda e, _m: delivered.append(e))
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert delivered and all(e is None for e in delivered), [e for e in delivered if e is not None][:3]
    assert len(calls) >= 2, f"oauth_cb called {len(calls)} times over two token lifetimes"
    reauthenticated = [line for line in lines if "Auth in state REAUTH" in line]
    assert reauthenticated, "librdkafka never re-authenticated:\n" + "\n".join(lines[-30:])
