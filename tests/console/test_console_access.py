"""Who may use the console's API: the permissions its paths need (in-process); on a secured server
(HTTP over SASL_SSL with an authorizer, reads open) records refused without credentials or the READ
ACL and shown with it, while descriptions stay open; and ``millrace groups`` logging in with Basic
credentials from a file where reads are authenticated."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from millrace.gateway.http.site import endpoint_permission
from tests.security.test_http_security import (  # noqa: F401 - secured: the fixture
    PLAIN,
    Secured,
    grant,
    jaas_plain,
    secured,
)
from tests.server_process import ServerProcess

trustme = pytest.importorskip("trustme")
pytestmark = pytest.mark.timeout(180)


def asked(method: str, path: str) -> tuple[bool, str, str, str]:
    mutating, p = endpoint_permission(method, [s for s in path.split("/") if s], "kafka")
    return mutating, p.operation.name, p.resource_type.name, p.name


def test_console_endpoint_permissions() -> None:
    cluster = (False, "DESCRIBE", "CLUSTER", "kafka-cluster")
    for path in ("/", "/static/console.js", "/api/overview", "/api/cluster", "/api/groups", "/api/topics",
                 "/api/reader-groups"):
        assert asked("GET", path) == cluster, path
    assert asked("GET", "/api/groups/billing") == (False, "DESCRIBE", "GROUP", "billing")
    # A native reader group is authorized as GROUP SCOPE/GROUP, as the native listener authorizes it.
    assert asked("GET", "/api/reader-groups/iot/dashboard") == (False, "DESCRIBE", "GROUP", "iot/dashboard")
    assert asked("GET", "/api/topics/orders") == (False, "DESCRIBE", "TOPIC", "orders")
    assert asked("GET", "/api/topics/orders/messages") == (False, "READ", "TOPIC", "orders")
    assert asked("GET", "/api/heatmap/kafka/orders") == (False, "DESCRIBE", "TOPIC", "orders")
    assert asked("GET", "/api/heatmap/iot/sensors") == (False, "DESCRIBE", "TOPIC", "iot/sensors")
    assert asked("POST", "/api/groups/billing") == (True, "ALTER", "CLUSTER", "kafka-cluster")


def test_records_need_the_read_acl_where_descriptions_are_open(secured: Secured) -> None:  # noqa: F811
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": secured.process.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": PLAIN["admin"]})
    producer.produce("denied", b"secret record", partition=0)
    assert producer.flush(30) == 0
    messages = "/api/topics/denied/messages?partition=0&offset=0"
    assert secured.request("GET", "/api/topics/denied").status_code == 200  # a description: open
    assert secured.request("GET", "/api/heatmap/kafka/denied").status_code == 200
    assert secured.request("GET", messages).status_code == 401
    refused = secured.request("GET", messages, auth=("carol", PLAIN["carol"]))
    assert refused.status_code == 403 and "READ on TOPIC 'denied'" in refused.json()["error"]
    grant(secured, "User:carol", "denied", "READ")
    deadline = time.monotonic() + 10
    while (shown := secured.request("GET", messages, auth=("carol", PLAIN["carol"]))).status_code == 403:
        assert time.monotonic() < deadline, "the ACL never applied"
        time.sleep(0.2)
    assert shown.status_code == 200, shown.text
    assert [r["value"] for r in shown.json()["records"]] == ["secret record"]
    assert secured.request("GET", messages, auth=("bob", PLAIN["bob"])).status_code == 403


def test_groups_cli_logs_in_where_reads_are_authenticated(tmp_path: Path) -> None:
    (tmp_path / "server.properties").write_text("\n".join([
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,HTTP:SASL_PLAINTEXT",
        f"listener.name.http.plain.sasl.jaas.config={jaas_plain({'bob': PLAIN['bob']})}",
        "millrace.http.authentication.required.for.reads=true",
    ]) + "\n")
    (tmp_path / "bob.password").write_text(PLAIN["bob"] + "\n")
    (tmp_path / "wrong.password").write_text("not-bobs\n")

    def groups(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "millrace", "groups", "list", "--http",
                               f"http://127.0.0.1:{process.http_port}", *args],
                              capture_output=True, text=True, timeout=60)

    with ServerProcess(str(tmp_path / "data"), "--config", str(tmp_path / "server.properties")) as process:
        refused = groups()
        assert refused.returncode == 1 and "401 authentication required" in refused.stderr
        wrong = groups("--user", "bob", "--password-file", str(tmp_path / "wrong.password"))
        assert wrong.returncode == 1 and "401" in wrong.stderr
        missing = groups("--user", "bob")
        assert missing.returncode == 1 and "--user needs --password-file" in missing.stderr
        listed = groups("--user", "bob", "--password-file", str(tmp_path / "bob.password"))
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == ["GROUP", "STATE", "TYPE", "MEMBERS", "LAG"]
        assert "bob-secret" not in listed.stdout + listed.stderr


def test_groups_cli_over_https_trusts_the_given_ca(secured: Secured) -> None:  # noqa: F811
    def groups(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "millrace", "groups", "list", "--http", secured.base, *args],
                              capture_output=True, text=True, timeout=60)

    untrusted = groups()
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    trusted = groups("--ca-file", str(secured.ca), "--json")
    assert trusted.returncode == 0, trusted.stderr
    assert set(json.loads(trusted.stdout)) == {"groups", "reader_groups"}
