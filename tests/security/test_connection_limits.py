"""Hostile clients against real server processes, through raw sockets: the limits every listener holds a
client to (``gateway/shared/limits.py``) refuse them, and what was acknowledged before stays readable.

- Memory: a Kafka frame past ``socket.request.max.bytes`` closes its connection; frames still arriving
  share ``queued.max.request.bytes`` (a connection whose frame does not fit stops reading, reported as
  paused for "memory", and reads again once bytes return); sixteen connections announcing 100 MB frames
  and trickling them leave the server's RSS near where it was once they close; the native listener of
  a server with an authorizer reads no frame past ``sasl.server.max.receive.size`` before a login; an
  HTTP request needing credentials is answered 401 before its body is read, a body past the bound 413.
- CPU and time: a SCRAM user name of 500 KB is refused before SASLprep and logged as a short prefix;
  after ``millrace.authentication.failures.max`` failed logins an address is refused on every listener
  (Kafka, native, HTTP Basic) even with the right password, other addresses and users who logged in from
  it before are not (``LoginFailures`` also checked in-process with a clock of its own); a connection that
  does not authenticate within ``millrace.authentication.timeout.ms``, or stays idle for
  ``connections.max.idle.ms``, is closed.

Clients on distinct loopback addresses (127.0.0.N) have their own failed-login counts."""

from __future__ import annotations

import base64
import contextlib
import http.client
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition

from millrace.gateway.kafka_protocol.codec import decode_response, encode_request
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.api_versions import ApiVersionsRequest
from millrace.gateway.kafka_protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from millrace.gateway.kafka_protocol.messages.sasl_handshake import SaslHandshakeRequest
from millrace.gateway.shared.limits import LoginFailures
from millrace.protocol import messages as m
from millrace.protocol.wire import Status, decode_body, encode_frame
from tests.server_process import ServerProcess
from tests.test_flood import RssSampler
from tests.tls_files import make_certificates

pytestmark = pytest.mark.timeout(240)

MIB = 1 << 20
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
USERS = {"admin": "admin-secret", "alice": "alice-secret"}
FAILURES_MAX = 3
AUTHENTICATION_TIMEOUT_MS = 1500
FAILED_LOGIN_DELAY_MS = 400
HTTP_BODY_MAX = 64 * 1024
SPLIT = b'{"segment": 0, "pieces": 2}'  # a split request's body
SASL_AUTHENTICATION_FAILED = int(ErrorCode.SASL_AUTHENTICATION_FAILED)


# Raw clients.

def connect(port: int, source: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the server")
        data += chunk
    return bytes(data)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (whatever it sends first is read)."""
    sock.settimeout(within)
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


class RawKafka:
    """One Kafka connection speaking the server's own codec, one request at a time."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        self.sock = connect(port, source)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, request, client_id="hostile"))
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        header, body = decode_response(api_key, version, recv_exact(self.sock, size))
        assert header.correlation_id == self.correlation_id
        return body

    def api_versions(self) -> Any:
        return self.call(18, 0, ApiVersionsRequest())

    def login(self, mechanism: str, token: bytes) -> Any:
        """SaslHandshake v1 then one SaslAuthenticate v2: its response."""
        assert self.call(17, 1, SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        return self.call(36, 2, SaslAuthenticateRequest(auth_bytes=token))

    def close(self) -> None:
        self.sock.close()


def native_call(sock: socket.socket, request_id: int, request: m.Request, payload: bytes = b"") -> tuple[int, dict]:
    """One native request on ``sock``: (status, reply header)."""
    sock.sendall(encode_frame(request.command, request_id, m.to_header(request), payload))
    (size,) = struct.unpack(">I", recv_exact(sock, 4))
    status, answered, header, _ = decode_body(recv_exact(sock, size))
    assert answered == request_id
    return status, header


def native_login(port: int, user: str, password: str, source: str) -> tuple[int, socket.socket]:
    """AUTH_HANDSHAKE (PLAIN) and AUTHENTICATE on a new native connection: the status and the socket."""
    sock = connect(port, source)
    status, _ = native_call(sock, 1, m.AuthHandshake(mechanism="PLAIN"))
    assert status == Status.OK
    status, _ = native_call(sock, 2, m.Authenticate(), f"\0{user}\0{password}".encode())
    return status, sock


def http_request(port: int, method: str, path: str, headers: dict[str, str], body: bytes | None = None,
                 source: str = "127.0.0.1") -> http.client.HTTPResponse:
    """A request whose body is sent only if given (``None``: headers alone, as a client waiting for an
    early answer): the response."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    connection.putrequest(method, path, skip_accept_encoding=True)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.endheaders()
    if body is not None:
        connection.send(body)
    return connection.getresponse()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def jaas_plain(users: dict[str, str]) -> str:
    return f"{PLAIN_MODULE} required " + " ".join(f'user_{u}="{p}"' for u, p in users.items()) + ";"


def produce(bootstrap: str, topic: str, values: list[bytes], **config: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **config})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, count: int, **config: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, **config})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def paused_for_memory(server: ServerProcess, listener: str = "PLAINTEXT") -> int:
    text = requests.get(f"http://127.0.0.1:{server.http_port}/metrics", timeout=30).text
    found = re.search(rf'millrace_connections_paused{{listener="{listener}",reason="memory"}} (\S+)', text)
    assert found is not None, "no millrace_connections_paused series for memory"
    return int(float(found.group(1)))


def wait_for(condition: Any, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


class Trickler(threading.Thread):
    """Announces a frame of ``announced`` bytes and sends up to ``send`` of it, for as long as the server
    reads (a server that stops reading leaves it blocked, which is the point); closes when told."""

    def __init__(self, port: int, announced: int, send: int, prefix: bytes = b"") -> None:
        super().__init__(daemon=True)
        self.sock = connect(port)
        self.sock.settimeout(None)
        self.announced, self.send_bytes, self.prefix = announced, send, prefix
        self.sent = 0

    def run(self) -> None:
        chunk = b"\0" * (256 * 1024)
        with contextlib.suppress(OSError):  # closed under it: done
            self.sock.sendall(self.prefix + struct.pack(">I", self.announced))
            while self.sent < self.send_bytes:
                self.sent += self.sock.send(chunk[: self.send_bytes - self.sent])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


# Memory.

@pytest.fixture(scope="module")
def small_limits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("small-limits")
    server = ServerProcess(str(home / "data"), "--log-level", "INFO",
                           "--override", f"socket.request.max.bytes={4 * MIB}",
                           "--override", f"queued.max.request.bytes={8 * MIB}").start()
    yield server
    server.kill()


def test_a_kafka_frame_past_socket_request_max_bytes_closes_its_connection(small_limits: ServerProcess) -> None:
    produce(small_limits.bootstrap, "kept", [b"before"])
    hostile = connect(small_limits.kafka_port)
    hostile.sendall(struct.pack(">I", 4 * MIB + 1) + b"\0" * 1024)
    assert closed_by_server(hostile, 10)
    assert wait_for(lambda: any("exceeds 4194304" in line for line in small_limits.output))
    assert consume(small_limits.bootstrap, "kept", 1) == [b"before"]


def test_frames_still_arriving_wait_for_the_memory_pool(small_limits: ServerProcess) -> None:
    """8 MiB of pool, frames of 3 MiB: two are read, the third connection stops reading until one of the
    first two goes; a small request of a good client is served meanwhile (it arrives whole)."""
    produce(small_limits.bootstrap, "pooled", [b"before"])
    first, second, third = (Trickler(small_limits.kafka_port, 3 * MIB, MIB) for _ in range(3))
    for trickler in (first, second):
        trickler.start()
        trickler.join(10)
        assert trickler.sent == MIB
    third.start()
    assert wait_for(lambda: paused_for_memory(small_limits) == 1)
    good = RawKafka(small_limits.kafka_port)
    assert good.api_versions().error_code == 0
    first.close()
    assert wait_for(lambda: paused_for_memory(small_limits) == 0)
    third.join(10)
    assert third.sent == MIB  # read again
    for trickler in (second, third):
        trickler.close()
    good.close()
    produce(small_limits.bootstrap, "pooled", [b"after"])
    assert consume(small_limits.bootstrap, "pooled", 2) == [b"before", b"after"]


def test_trickled_100_mb_frames_hold_little_and_give_it_back(tmp_path: Path) -> None:
    """Sixteen connections announce 100 MB Kafka frames and send 40 MiB of each as fast as the server
    reads: with the default pool (256 MiB) two frames are read, the others wait, and the server holds what
    it read of the two; once all close, RSS comes back near where it was. (Before the pool and the frame
    buffers' memory maps, this took 16 x 40 MiB, most of which stayed after the close.)"""
    server = ServerProcess(str(tmp_path / "data")).start()
    try:
        assert server.proc is not None
        produce(server.bootstrap, "kept", [b"before"])
        assert consume(server.bootstrap, "kept", 1) == [b"before"]  # the consumer path warm too
        process = psutil.Process(server.proc.pid)
        baseline = process.memory_info().rss
        sampler = RssSampler(server.proc.pid)
        sampler.start()
        tricklers = [Trickler(server.kafka_port, 100_000_000, 40 * MIB) for _ in range(16)]
        for trickler in tricklers:
            trickler.start()
        assert wait_for(lambda: sum(t.sent == 40 * MIB for t in tricklers) == 2, 60)
        assert wait_for(lambda: paused_for_memory(server) == 14)
        for trickler in tricklers:
            trickler.close()
        sampler.done.set()
        sampler.join(10)
        # Two frames' 40 MiB read; the others' bytes are in the kernel's buffers, not the server's.
        assert sampler.peak - baseline < 160 * MIB, (baseline, sampler.peak)
        assert wait_for(lambda: process.memory_info().rss - baseline < 48 * MIB, 30), (
            baseline, process.memory_info().rss)
        assert consume(server.bootstrap, "kept", 1) == [b"before"]
    finally:
        server.kill()


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An authorizer on, every listener PLAINTEXT: a native connection must log in (and cannot: no SASL)."""
    home = tmp_path_factory.mktemp("acl-limits")
    server = ServerProcess(str(home / "data"), "--log-level", "INFO",
                           "--override", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "--override", "allow.everyone.if.no.acl.found=true").start()
    yield server
    server.kill()


def test_the_native_listener_reads_no_large_frame_before_a_login(acl_server: ServerProcess) -> None:
    produce(acl_server.bootstrap, "kept", [b"before"])
    hello = connect(acl_server.native_port)
    status, header = native_call(hello, 1, m.Hello())
    assert status == Status.OK and header["authentication"] is True
    hello.sendall(struct.pack(">I", 32 * MIB - 1) + b"\0" * 65536)  # within the protocol's 32 MiB
    assert closed_by_server(hello, 10)
    assert wait_for(lambda: any("frame of 33554431 bytes exceeds 524288" in line for line in acl_server.output))
    assert consume(acl_server.bootstrap, "kept", 1) == [b"before"]


# Authentication.

@dataclass
class Secured:
    process: ServerProcess

    def kafka_config(self, password: str = USERS["alice"]) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                "sasl.password": password}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """Kafka, native and HTTP listeners all SASL (PLAIN and SCRAM), few failed logins allowed."""
    home = tmp_path_factory.mktemp("secured-limits")
    (home / "server.properties").write_text("\n".join([
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,NATIVE:SASL_PLAINTEXT,HTTP:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        "listener.name.native.sasl.enabled.mechanisms=PLAIN",
        "listener.name.http.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas_plain(USERS)}",
        f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={SCRAM_MODULE} required;",
        f"listener.name.native.plain.sasl.jaas.config={jaas_plain(USERS)}",
        f"listener.name.http.plain.sasl.jaas.config={jaas_plain(USERS)}",
        f"millrace.authentication.failures.max={FAILURES_MAX}",
        f"millrace.authentication.timeout.ms={AUTHENTICATION_TIMEOUT_MS}",
        f"connection.failed.authentication.delay.ms={FAILED_LOGIN_DELAY_MS}",
        f"millrace.http.max.request.body.bytes={HTTP_BODY_MAX}",
    ]) + "\n")
    process = ServerProcess(str(home / "data"), "--config", str(home / "server.properties"),
                            "--log-level", "INFO").start()
    yield Secured(process)
    process.kill()


def test_a_scram_user_name_of_500_kb_is_refused_before_saslprep(secured: Secured) -> None:
    kafka = secured.process
    produce(kafka.bootstrap, "kept", [b"before"], **secured.kafka_config())
    name = "q" * 500_000  # within the pre-authentication frame bound (512 KiB)
    hostile = RawKafka(kafka.kafka_port, source="127.0.0.2")
    answer = hostile.login("SCRAM-SHA-256", f"n,,n={name},r=abcdefghijklmnop".encode())
    assert answer.error_code == SASL_AUTHENTICATION_FAILED
    assert closed_by_server(hostile.sock, 10)
    assert wait_for(lambda: any("SCRAM client first message of 500" in line for line in kafka.output))
    # The log shows a short prefix of the name, never the name.
    assert not any("q" * 100 in line for line in kafka.output)
    assert consume(kafka.bootstrap, "kept", 1, **secured.kafka_config()) == [b"before"]


def test_failed_logins_refuse_an_address_on_every_listener(secured: Secured) -> None:
    server, source = secured.process, "127.0.0.3"
    right = f"\0alice\0{USERS['alice']}".encode()
    admin = f"\0admin\0{USERS['admin']}".encode()
    earlier = RawKafka(server.kafka_port, source)  # admin logged in from this address before
    assert earlier.login("PLAIN", admin).error_code == 0
    earlier.close()
    for _ in range(FAILURES_MAX):
        failing = RawKafka(server.kafka_port, source)
        assert failing.login("PLAIN", b"\0alice\0wrong").error_code == SASL_AUTHENTICATION_FAILED
        failing.close()
    # The right password now fails too, unchecked, on the Kafka listener...
    refused = RawKafka(server.kafka_port, source)
    assert refused.login("PLAIN", right).error_code == SASL_AUTHENTICATION_FAILED
    assert closed_by_server(refused.sock, 10)
    assert wait_for(lambda: any(f"{FAILURES_MAX} failed logins from {source}" in line for line in server.output))
    # ...on the native listener...
    status, sock = native_login(server.native_port, "alice", USERS["alice"], source)
    assert status == Status.AUTHENTICATION_FAILED
    assert closed_by_server(sock, 10)
    # ...and on the HTTP listener, where the answer says when to come back (before any body is read).
    answer = http_request(server.http_port, "POST", "/api/streams/kafka/x/split",
                          {"authorization": basic("alice", USERS["alice"]), "content-type": "application/json",
                           "content-length": "2"}, source=source)
    assert answer.status == 429 and answer.getheader("retry-after")
    # A user who logged in from the address before is still let try there (one misconfigured client must
    # not lock out its host): admin's login is checked, and succeeds.
    trusted = RawKafka(server.kafka_port, source)
    assert trusted.login("PLAIN", admin).error_code == 0
    trusted.close()
    # Another address is not affected.
    fine = RawKafka(server.kafka_port, "127.0.0.4")
    assert fine.login("PLAIN", right).error_code == 0
    fine.close()
    status, sock = native_login(server.native_port, "alice", USERS["alice"], "127.0.0.4")
    assert status == Status.OK
    sock.close()


def test_http_basic_failures_are_limited_per_address(secured: Secured) -> None:
    server, source = secured.process, "127.0.0.5"
    split = "/api/streams/kafka/nothing/split"
    for _ in range(FAILURES_MAX):
        answer = http_request(server.http_port, "POST", split, {"authorization": basic("alice", "wrong"),
                                                                 "content-type": "application/json",
                                                                 "content-length": "2"}, b"{}", source)
        assert answer.status == 401
    answer = http_request(server.http_port, "POST", split, {"authorization": basic("alice", USERS["alice"]),
                                                             "content-type": "application/json",
                                                             "content-length": "2"}, b"{}", source)
    assert answer.status == 429
    answer = http_request(server.http_port, "POST", split, {"authorization": basic("alice", USERS["alice"]),
                                                             "content-type": "application/json",
                                                             "content-length": str(len(SPLIT))}, SPLIT, "127.0.0.6")
    assert answer.status == 404  # authenticated, and the stream does not exist


def test_http_refuses_before_reading_a_body(secured: Secured) -> None:
    server, source = secured.process, "127.0.0.7"
    split = "/api/streams/kafka/nothing/split"
    # An anonymous 300 MB POST: answered 401 from its headers alone, none of the body sent.
    answer = http_request(server.http_port, "POST", split, {"content-type": "application/json",
                                                             "content-length": "300000000"}, None, source)
    assert answer.status == 401 and answer.getheader("www-authenticate")
    # A client that sends its body anyway still reads the answer: the server drops the body as it comes
    # instead of closing on it (a close with unread bytes would reset the connection under the answer).
    url = f"http://127.0.0.1:{server.http_port}{split}"
    sent_anyway = requests.post(url, data=b"x" * (4 * MIB), headers={"content-type": "application/json"}, timeout=30)
    assert sent_anyway.status_code == 401
    # Wrong credentials: the same, before the body.
    answer = http_request(server.http_port, "POST", split, {"authorization": basic("alice", "wrong"),
                                                             "content-type": "application/json",
                                                             "content-length": "1000"}, None, source)
    assert answer.status == 401
    right = basic("admin", USERS["admin"])
    # The right credentials, a body past the bound: 413, from the declared length...
    answer = http_request(server.http_port, "POST", split, {"authorization": right, "content-type": "application/json",
                                                             "content-length": str(HTTP_BODY_MAX + 1)}, None, source)
    assert answer.status == 413
    # ...or once a chunked body passes it.
    chunk = b"x" * 16384
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(HTTP_BODY_MAX // len(chunk) + 2))
    answer = http_request(server.http_port, "POST", split, {"authorization": right, "content-type": "application/json",
                                                             "transfer-encoding": "chunked"}, chunked, source)
    assert answer.status == 413
    # A request within the bound with the right credentials is served (its stream does not exist).
    answer = http_request(server.http_port, "POST", split, {"authorization": right, "content-type": "application/json",
                                                             "content-length": str(len(SPLIT))}, SPLIT, source)
    assert answer.status == 404


def test_connections_that_do_not_authenticate_in_time_are_closed(secured: Secured) -> None:
    server = secured.process
    kafka = RawKafka(server.kafka_port, "127.0.0.8")
    assert kafka.api_versions().error_code == 0
    native = connect(server.native_port, "127.0.0.8")
    assert native_call(native, 1, m.Hello())[0] == Status.OK
    logged_in = RawKafka(server.kafka_port, "127.0.0.8")
    assert logged_in.login("PLAIN", f"\0alice\0{USERS['alice']}".encode()).error_code == 0
    assert closed_by_server(kafka.sock, 15)
    assert closed_by_server(native, 15)
    assert wait_for(lambda: any("not authenticated within 1500 ms" in line for line in server.output))
    # The one that logged in is still served, past the deadline.
    assert not closed_by_server(logged_in.sock, AUTHENTICATION_TIMEOUT_MS / 1000 + 1)
    assert logged_in.api_versions().error_code == 0
    logged_in.close()


def test_a_failed_login_is_answered_late_and_reads_nothing_meanwhile(secured: Secured) -> None:
    """connection.failed.authentication.delay.ms (KIP-306): a wrong password is answered only after the
    delay, then the connection closes; a request pipelined behind the login is never answered, so it
    cannot tell the client the outcome sooner. The same on the native and HTTP listeners."""
    server, source, delay = secured.process, "127.0.0.9", FAILED_LOGIN_DELAY_MS / 1000
    kafka = RawKafka(server.kafka_port, source)
    assert kafka.call(17, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    started = time.monotonic()
    kafka.sock.sendall(encode_request(36, 2, 10, SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"), client_id="x")
                       + encode_request(18, 0, 11, ApiVersionsRequest(), client_id="x"))
    (size,) = struct.unpack(">i", recv_exact(kafka.sock, 4))
    header, body = decode_response(36, 2, recv_exact(kafka.sock, size))
    assert time.monotonic() - started >= delay
    assert (header.correlation_id, body.error_code) == (10, SASL_AUTHENTICATION_FAILED)
    assert closed_by_server(kafka.sock, 10)  # and ApiVersions was never answered

    sock = connect(server.native_port, source)
    assert native_call(sock, 1, m.AuthHandshake(mechanism="PLAIN"))[0] == Status.OK
    started = time.monotonic()
    assert native_call(sock, 2, m.Authenticate(), b"\0alice\0wrong")[0] == Status.AUTHENTICATION_FAILED
    assert time.monotonic() - started >= delay
    assert closed_by_server(sock, 10)

    started = time.monotonic()
    answer = http_request(server.http_port, "POST", "/api/streams/kafka/x/split",
                          {"authorization": basic("alice", "wrong"), "content-type": "application/json",
                           "content-length": "2"}, b"{}", source)
    assert answer.status == 401
    assert time.monotonic() - started >= delay
    # The right password is answered at once.
    started = time.monotonic()
    right = RawKafka(server.kafka_port, "127.0.0.10")
    assert right.login("PLAIN", f"\0alice\0{USERS['alice']}".encode()).error_code == 0
    assert time.monotonic() - started < delay
    right.close()


def test_unfinished_tls_handshakes_and_http_requests_are_closed_at_the_login_deadline(tmp_path: Path) -> None:
    """Below every login there is a TLS handshake, and over HTTP a request's headers: a client that never
    finishes them is closed at millrace.authentication.timeout.ms on the Kafka, native and HTTP listeners,
    while a client that finished its handshake is served past that deadline."""
    certificates = make_certificates(tmp_path)
    (tmp_path / "server.properties").write_text("\n".join([
        "listeners=SSL://127.0.0.1:0",
        "listener.security.protocol.map=SSL:SSL,NATIVE:SSL,HTTP:PLAINTEXT",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certificates.server_pem}",
        "listener.name.native.ssl.keystore.type=PEM",
        f"listener.name.native.ssl.keystore.location={certificates.server_pem}",
        f"millrace.authentication.timeout.ms={AUTHENTICATION_TIMEOUT_MS}",
    ]) + "\n")
    server = ServerProcess(str(tmp_path / "data"), "--config", str(tmp_path / "server.properties"),
                           "--log-level", "INFO").start()
    try:
        context = ssl.create_default_context(cafile=str(certificates.ca_pem))
        finished = context.wrap_socket(connect(server.kafka_port), server_hostname="127.0.0.1")
        silent_kafka, silent_native = connect(server.kafka_port), connect(server.native_port)
        trickling = connect(server.kafka_port)
        trickling.sendall(b"\x16\x03\x01")  # the start of a ClientHello, never the rest
        half_request = connect(server.http_port)
        half_request.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        for sock in (silent_kafka, silent_native, trickling, half_request):
            assert closed_by_server(sock, 10)
        assert wait_for(lambda: any(f"TLS handshake not done within {AUTHENTICATION_TIMEOUT_MS} ms" in line
                                    for line in server.output))
        assert wait_for(lambda: any(f"no request within {AUTHENTICATION_TIMEOUT_MS} ms" in line
                                    for line in server.output))
        # The client that finished its handshake is still served, past the deadline.
        finished.sendall(encode_request(18, 0, 1, ApiVersionsRequest(), client_id="tls"))
        (size,) = struct.unpack(">i", recv_exact(finished, 4))
        assert decode_response(18, 0, recv_exact(finished, size))[1].error_code == 0
        finished.close()
        assert requests.get(f"http://127.0.0.1:{server.http_port}/health", timeout=10).status_code == 200
    finally:
        server.kill()


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    server = ServerProcess(str(tmp_path / "data"), "--log-level", "INFO",
                           "--override", "connections.max.idle.ms=1000").start()
    try:
        idle = RawKafka(server.kafka_port)
        busy = RawKafka(server.kafka_port)
        native = connect(server.native_port)
        http_idle = connect(server.http_port)
        http_idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # answered, then kept open idle
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # busy asks something every 200 ms; idle and native nothing
            assert busy.api_versions().error_code == 0
            time.sleep(0.2)
        assert closed_by_server(idle.sock, 5)
        assert closed_by_server(native, 5)
        assert closed_by_server(http_idle, 5)
        assert busy.api_versions().error_code == 0
        assert any("idle for 1000 ms (connections.max.idle.ms)" in line for line in server.output)
        busy.close()
    finally:
        server.kill()


def test_login_failures_count_by_address_and_trusted_user() -> None:
    now = [0.0]
    failures = LoginFailures(3, 60.0, clock=lambda: now[0])
    failures.succeeded("10.0.0.1", "admin")
    for _ in range(3):
        assert not failures.refused("10.0.0.1", "alice")
        failures.failed("10.0.0.1", "alice")
    assert failures.refused("10.0.0.1", "alice") and failures.refused("10.0.0.1")
    assert failures.refused("10.0.0.1", "mallory")  # any other name: the address is refused
    assert not failures.refused("10.0.0.2", "alice")
    # admin logged in from there: still tried, on its own count, until it fails as often itself.
    assert not failures.refused("10.0.0.1", "admin")
    for _ in range(3):
        failures.failed("10.0.0.1", "admin")
    assert failures.refused("10.0.0.1", "admin")
    now[0] = 60.0  # the window has passed
    assert not failures.refused("10.0.0.1", "alice")
