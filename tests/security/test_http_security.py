"""The HTTP API secured as a listener named HTTP: TLS from ``listener.name.http.ssl.*`` (a trustme CA),
reads open by default and authenticated when ``millrace.http.authentication.required.for.reads`` says so,
and split/merge refused without credentials (401 with ``WWW-Authenticate``), with wrong ones (401, the
same answer), without the ACL (403), and done with it (granted by CreateAcls through a SASL Kafka
listener), as a super user, and with a Bearer JWT. Real server processes; the request parsing, the
endpoint table and the Basic cache are also checked in-process."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from millrace.gateway.http.site import endpoint_permission, stream_acl_resource
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.gateway.security.http_auth import HttpAuthenticator
from millrace.gateway.security.properties import ConfigError, security_settings
from millrace.gateway.security.sasl import scram_credential
from tests.security.test_oauth import AUDIENCE, ISSUER, jwk, rsa_key, sign, write_jwks
from tests.server_process import ServerProcess, add_scram_args

trustme = pytest.importorskip("trustme")
pytestmark = pytest.mark.timeout(180)

PLAIN = {"admin": "admin-secret", "bob": "bob-secret", "carol": "carol-secret"}
SCRAM_USER, SCRAM_PASSWORD = "dave", "dave-secret-scram"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PARTITIONS = 4


@dataclass
class Secured:
    process: ServerProcess
    ca: Path
    key: Any  # the identity provider's signing key

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.process.http_port}"

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.process.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": PLAIN["admin"]})

    def request(self, method: str, path: str, body: Any = None, auth: tuple[str, str] | None = None,
                token: str | None = None, content_type: str = "application/json") -> requests.Response:
        headers = {"content-type": content_type} if body is not None else {}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return requests.request(method, self.base + path, data=None if body is None else json.dumps(body),
                                auth=auth, headers=headers, verify=str(self.ca), timeout=30)

    def split(self, topic: str, **kwargs: Any) -> requests.Response:
        return self.request("POST", f"/api/streams/kafka/{topic}/split", {"segment": 0, "pieces": 2}, **kwargs)


def jaas_plain(users: dict[str, str]) -> str:
    return f"{PLAIN_MODULE} required " + " ".join(f'user_{u}="{p}"' for u, p in users.items()) + ";"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("http-security")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(home / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(home / "server.pem"))
    key = rsa_key()
    write_jwks(home / "jwks.json", jwk(key, "k1"))
    oauth = "listener.name.http.oauthbearer."
    (home / "server.properties").write_text("\n".join([
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,HTTP:SASL_SSL",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas_plain({'admin': PLAIN['admin']})}",
        "listener.name.http.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,OAUTHBEARER",
        f"listener.name.http.plain.sasl.jaas.config={jaas_plain(PLAIN)}",
        f"listener.name.http.scram-sha-256.sasl.jaas.config={SCRAM_MODULE} required;",
        f"{oauth}sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
        f"{oauth}sasl.oauthbearer.jwks.endpoint.url=file:{home / 'jwks.json'}",
        f"{oauth}sasl.oauthbearer.expected.audience={AUDIENCE}",
        f"{oauth}sasl.oauthbearer.expected.issuer={ISSUER}",
        "listener.name.http.ssl.keystore.type=PEM",
        f"listener.name.http.ssl.keystore.location={home / 'server.pem'}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
    ]) + "\n")
    process = ServerProcess(str(home / "data"), "--config", str(home / "server.properties"), "--log-level", "INFO",
                            *add_scram_args(home, f"SCRAM-SHA-256=[name={SCRAM_USER},password={SCRAM_PASSWORD}]")).start()
    try:
        server = Secured(process, home / "ca.pem", key)
        from confluent_kafka.admin import NewTopic

        topics = ["bob-topic", "dave-topic", "admin-topic", "token-topic", "denied"]
        admin = server.admin()  # kept: futures of a collected client fail
        created = admin.create_topics(
            [NewTopic(t, PARTITIONS, 1, config={"millrace.segments.initial": "1"}) for t in topics])
        for future in created.values():
            future.result(30)
        yield server
        assert process.stop(timeout=30) == 0
    finally:
        process.kill()


def grant(server: Secured, principal: str, topic: str, operation: str = "ALTER") -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                         AclOperation[operation], AclPermissionType.ALLOW)
    admin = server.admin()
    for future in admin.create_acls([binding]).values():
        future.result(30)


def test_tls_and_open_reads(secured: Secured) -> None:
    health = secured.request("GET", "/health")
    assert health.status_code == 200 and health.json()["healthy"]
    described = secured.request("GET", "/api/streams/kafka/denied")
    assert described.status_code == 200 and len(described.json()["segments"]) == 1
    with pytest.raises(requests.exceptions.SSLError):  # the server's certificate is not of a CA the client trusts
        requests.get(secured.base + "/health", timeout=10)
    with pytest.raises(requests.exceptions.ConnectionError):  # plain HTTP on the TLS port
        requests.get(f"http://127.0.0.1:{secured.process.http_port}/health", timeout=10)


def test_split_without_or_with_wrong_credentials_is_401(secured: Secured) -> None:
    anonymous = secured.split("denied")
    assert anonymous.status_code == 401
    challenges = anonymous.headers["www-authenticate"]
    assert 'Basic realm="millrace"' in challenges and 'Bearer realm="millrace"' in challenges
    wrong = secured.split("denied", auth=("bob", "not-bobs-password"))
    unknown = secured.split("denied", auth=("nobody", "whatever"))
    wrong_scram = secured.split("denied", auth=(SCRAM_USER, "not-daves-password"))
    garbage = requests.post(secured.base + "/api/streams/kafka/denied/split", data="{}", timeout=30,
                            verify=str(secured.ca), headers={"authorization": "Basic !!not-base64!!"})
    for refused in (wrong, unknown, wrong_scram, garbage):
        assert refused.status_code == 401
        assert refused.json() == anonymous.json() == {"error": "authentication required",
                                                      "type": "AuthenticationRequired"}
    assert secured.request("GET", "/api/streams/kafka/denied").json()["segments"][0]["number"] == 0  # not split


def test_plain_user_needs_the_acl(secured: Secured) -> None:
    denied = secured.split("bob-topic", auth=("bob", PLAIN["bob"]))
    assert denied.status_code == 403
    assert denied.json()["type"] == "NotAuthorized" and "ALTER on TOPIC 'bob-topic'" in denied.json()["error"]
    grant(secured, "User:bob", "bob-topic")
    deadline = time.monotonic() + 10
    while (done := secured.split("bob-topic", auth=("bob", PLAIN["bob"]))).status_code == 403:
        assert time.monotonic() < deadline, "the ACL never applied"
        time.sleep(0.2)
    assert done.status_code == 200, done.text
    assert len(done.json()["segments"]) == 2
    # The ACL is bob's alone, and for that topic alone.
    assert secured.split("bob-topic", auth=("carol", PLAIN["carol"])).status_code == 403
    assert secured.split("denied", auth=("bob", PLAIN["bob"])).status_code == 403
    # A cross-site form cannot send JSON: an authenticated request must.
    form = secured.request("POST", "/api/streams/kafka/bob-topic/merge", {"segments": [1, 2]},
                           auth=("bob", PLAIN["bob"]), content_type="text/plain")
    assert form.status_code == 415


def test_scram_user_with_the_acl(secured: Secured) -> None:
    assert secured.split("dave-topic", auth=(SCRAM_USER, SCRAM_PASSWORD)).status_code == 403
    grant(secured, f"User:{SCRAM_USER}", "dave-topic")
    time.sleep(0.5)
    done = secured.split("dave-topic", auth=(SCRAM_USER, SCRAM_PASSWORD))
    assert done.status_code == 200, done.text
    merged = secured.request("POST", "/api/streams/kafka/dave-topic/merge", {"segments": [1, 2]},
                             auth=(SCRAM_USER, SCRAM_PASSWORD))  # a second check: from the cache
    assert merged.status_code == 200, merged.text
    assert [s["number"] for s in merged.json()["segments"]] == [3]


def test_super_user_may_do_anything(secured: Secured) -> None:
    done = secured.split("admin-topic", auth=("admin", PLAIN["admin"]))
    assert done.status_code == 200, done.text
    # Cluster-wide (here: unknown) endpoints need ALTER on the cluster: the super user has it, bob not.
    assert secured.request("POST", "/api/other", {}, auth=("admin", PLAIN["admin"])).status_code == 404
    assert secured.request("POST", "/api/other", {}, auth=("bob", PLAIN["bob"])).status_code == 403


def test_bearer_tokens(secured: Secured) -> None:
    assert secured.split("token-topic", token=sign(secured.key, sub="erin")).status_code == 403
    grant(secured, "User:erin", "token-topic")
    time.sleep(0.5)
    for refused in (sign(rsa_key(), sub="erin"),  # signed by a key the JWKS does not hold
                    sign(secured.key, sub="erin", exp=int(time.time()) - 3600),  # expired
                    sign(secured.key, sub="erin", aud="someone-else"),
                    "not-a-jwt"):
        answer = secured.split("token-topic", token=refused)
        assert answer.status_code == 401 and "Bearer" in answer.headers["www-authenticate"]
    done = secured.split("token-topic", token=sign(secured.key, sub="erin"))
    assert done.status_code == 200, done.text


def test_no_secret_in_the_output(secured: Secured) -> None:
    token = sign(rsa_key(), sub="mallory")
    secured.split("denied", token=token)
    secured.split("denied", auth=("bob", "bobs-mistyped-secret"))
    time.sleep(0.5)
    output = "".join(secured.process.output)
    assert "HTTP authentication from 127.0.0.1 failed" in output  # what is logged is there
    assert "HTTP bearer token from 127.0.0.1 refused" in output
    for secret in [*PLAIN.values(), SCRAM_PASSWORD, "bobs-mistyped-secret", token, token.split(".")[2]]:
        assert secret not in output


def test_reads_authenticated_when_configured_and_no_authorizer(tmp_path: Path) -> None:
    (tmp_path / "server.properties").write_text("\n".join([
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,HTTP:SASL_PLAINTEXT",
        f"listener.name.http.plain.sasl.jaas.config={jaas_plain({'bob': PLAIN['bob']})}",
        "millrace.http.authentication.required.for.reads=true",
    ]) + "\n")
    with ServerProcess(str(tmp_path / "data"), "--config", str(tmp_path / "server.properties")) as process:
        base = f"http://127.0.0.1:{process.http_port}"
        for path in ("/health", "/metrics", "/api/segments", "/api/streams", "/api/streams/kafka/t"):
            refused = requests.get(base + path, timeout=30)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"] == 'Basic realm="millrace", charset="UTF-8"'
        assert requests.get(base + "/health", auth=("bob", "wrong"), timeout=30).status_code == 401
        assert requests.get(base + "/health", auth=("bob", PLAIN["bob"]), timeout=30).status_code == 200
        # No authorizer: every authenticated principal may do everything; no principal, nothing.
        from tests.server_process import create_topic

        create_topic(process, "t", PARTITIONS, **{"millrace.segments.initial": "1"})
        split = f"{base}/api/streams/kafka/t/split"
        assert requests.post(split, json={"segment": 0, "pieces": 2}, timeout=30).status_code == 401
        done = requests.post(split, json={"segment": 0, "pieces": 2}, auth=("bob", PLAIN["bob"]), timeout=30)
        assert done.status_code == 200, done.text


# In-process: the configuration, the endpoint table, the Basic checks.

def test_configuration() -> None:
    assert security_settings({}).http.security_protocol == "PLAINTEXT"
    assert not security_settings({}).http.authenticates
    with pytest.raises(ConfigError, match="millrace.http.authentication.required.for.reads"):
        security_settings({"millrace.http.authentication.required.for.reads": "true"})
    with pytest.raises(ConfigError, match="HTTP names the HTTP API's listener"):
        security_settings({"listeners": "HTTP://:0", "listener.security.protocol.map": "HTTP:PLAINTEXT"})
    with pytest.raises(ConfigError, match="listener.name.http.plain.sasl.jaas.config"):
        security_settings({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,HTTP:SASL_PLAINTEXT",
                           "sasl.enabled.mechanisms": "PLAIN"})
    with pytest.raises(ConfigError, match="needs a key store"):
        security_settings({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,HTTP:SSL"})


def test_endpoint_permissions() -> None:
    def asked(method: str, path: str) -> tuple[bool, str, str, str]:
        mutating, p = endpoint_permission(method, [s for s in path.split("/") if s], "kafka")
        return mutating, p.operation.name, p.resource_type.name, p.name

    assert asked("GET", "/health") == (False, "DESCRIBE", "CLUSTER", "kafka-cluster")
    assert asked("GET", "/api/streams/kafka") == (False, "DESCRIBE", "CLUSTER", "kafka-cluster")
    assert asked("GET", "/api/streams/kafka/orders") == (False, "DESCRIBE", "TOPIC", "orders")
    assert asked("GET", "/api/streams/iot/sensors") == (False, "DESCRIBE", "TOPIC", "iot/sensors")
    assert asked("POST", "/api/streams/kafka/orders/split") == (True, "ALTER", "TOPIC", "orders")
    assert asked("POST", "/api/streams/iot/sensors/merge") == (True, "ALTER", "TOPIC", "iot/sensors")
    assert asked("DELETE", "/api/streams/kafka/orders") == (True, "ALTER", "CLUSTER", "kafka-cluster")
    assert asked("POST", "/health") == (True, "ALTER", "CLUSTER", "kafka-cluster")
    assert stream_acl_resource("kafka", "t", "kafka") == (ResourceType.TOPIC, "t")
    assert AclOperation.ALTER.name == "ALTER"


def test_basic_checks_and_their_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from millrace.gateway.security import http_auth

    settings = security_settings({
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,HTTP:SASL_PLAINTEXT",
        "listener.name.http.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.http.plain.sasl.jaas.config": jaas_plain({"bob": "bob-secret"}),
        "listener.name.http.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
    }).http
    credentials = {("dave", "SCRAM-SHA-512"): scram_credential("SCRAM-SHA-512", "dave-secret")}
    auth = HttpAuthenticator(settings, lambda user, mechanism: credentials.get((user, mechanism)), cache_size=2)
    basic = base64.b64encode(b"dave:dave-secret").decode()
    assert auth.scheme(f"Basic {basic}".encode()) == ("basic", basic)
    assert auth.basic_credentials(basic) == ("dave", "dave-secret")
    assert auth.basic_credentials("not base64!") is None
    assert str(auth.verify_basic("bob", "bob-secret")) == "User:bob"
    assert auth.verify_basic("bob", "bob-secre") is None
    derivations = []
    real = http_auth.scram_matches
    monkeypatch.setattr(http_auth, "scram_matches", lambda *a: derivations.append(a[0]) or real(*a))
    assert str(auth.verify_basic("dave", "dave-secret")) == "User:dave"
    assert str(auth.verify_basic("dave", "dave-secret")) == "User:dave"
    assert derivations == ["SCRAM-SHA-512"]  # the second from the cache
    assert auth.verify_basic("dave", "dave-wrong") is None
    assert auth.verify_basic("nobody", "x") is None
    assert len(derivations) == 3  # wrong passwords and unknown users cost a derivation each
    # A changed credential is checked again: the old password no longer works.
    credentials[("dave", "SCRAM-SHA-512")] = scram_credential("SCRAM-SHA-512", "new-secret")
    assert auth.verify_basic("dave", "dave-secret") is None
    assert str(auth.verify_basic("dave", "new-secret")) == "User:dave"
    for user in ("a", "b", "c"):  # the cache stays within its bound
        credentials[(user, "SCRAM-SHA-512")] = scram_credential("SCRAM-SHA-512", "pw")
        auth.verify_basic(user, "pw")
    assert len(auth._cache) == 2
    assert "secret" not in repr(auth)
