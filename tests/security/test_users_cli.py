"""``millrace users`` against a real server, as an operator runs it: over a SASL_SSL listener with the
authorizer on, logged in as the super user ``admin`` by a client properties file; the SCRAM user it makes
logs in with librdkafka, and is gone once deleted. A user who is not allowed to alter the cluster, a
wrong admin password and an unusable properties file each fail with a clear message."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server_process import REPO_ROOT, ServerProcess
from tests.tls_files import make_certificates

pytestmark = pytest.mark.timeout(120)

PASSWORDS = {"admin": "admin-secret", "bob": "bob-secret"}


class Server:
    def __init__(self, process: ServerProcess, home: Path, ca: Path) -> None:
        self.process, self.home, self.ca = process, home, ca

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.process.ports['kafka']}"

    def command_config(self, user: str, password: str) -> Path:
        path = self.home / f"{user}.properties"
        path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                        f'username="{user}" password="{password}";\n'
                        f"ssl.truststore.type=PEM\nssl.truststore.location={self.ca}\n")
        return path

    def users(self, config: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "millrace", "users", "--bootstrap-server", self.bootstrap,
                               "--command-config", str(config), *args], input=stdin, capture_output=True,
                              text=True, timeout=60, cwd=REPO_ROOT)

    def scram_login_works(self, user: str, password: str) -> bool:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                             "ssl.ca.location": str(self.ca), "sasl.mechanism": "SCRAM-SHA-256",
                             "sasl.username": user, "sasl.password": password})
        try:
            admin.list_topics(timeout=5)
            return True
        except Exception:  # noqa: BLE001 - librdkafka's authentication failure, or a timeout after it
            return False


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("users")
    certificates = make_certificates(home)
    server_pem, ca_pem = certificates.server_pem, certificates.ca_pem
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    properties = home / "server.properties"
    properties.write_text("\n".join([
        "listeners=SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f"required {users};",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram."
        "ScramLoginModule required;",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        # librdkafka retries a refused login every few tens of ms, all from 127.0.0.1 like every other
        # client here: the failed-login limit (tests/security/test_connection_limits.py) would refuse the
        # users this test logs in as next.
        "millrace.authentication.failures.max=1000000",
    ]) + "\n")
    process = ServerProcess(str(home / "data"), "--config", str(properties)).start()
    try:
        yield Server(process, home, ca_pem)
        assert process.stop(timeout=30) == 0
    finally:
        process.kill()


def test_set_list_and_delete_a_scram_user(server: Server) -> None:
    admin = server.command_config("admin", PASSWORDS["admin"])
    password_file = server.home / "carol.password"
    password_file.write_text("carol-secret\n")
    made = server.users(admin, "set", "carol", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password_file))
    assert made.returncode == 0, made.stderr
    assert "carol-secret" not in made.stdout + made.stderr
    assert server.scram_login_works("carol", "carol-secret")
    assert not server.scram_login_works("carol", "wrong")
    listed = server.users(admin, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    users: dict[str, Any] = json.loads(listed.stdout)
    assert users["carol"] == {"SCRAM-SHA-256": 4096}
    changed = server.users(admin, "set", "carol", "--mechanism", "SCRAM-SHA-256", "--iterations", "8192",
                           stdin="carol-new\n")  # the password from standard input
    assert changed.returncode == 0, changed.stderr
    assert server.scram_login_works("carol", "carol-new") and not server.scram_login_works("carol", "carol-secret")
    deleted = server.users(admin, "delete", "carol", "--mechanism", "SCRAM-SHA-256")
    assert deleted.returncode == 0, deleted.stderr
    assert not server.scram_login_works("carol", "carol-new")
    gone = server.users(admin, "list", "carol")
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr


def test_who_may_not_alter_the_cluster_is_refused(server: Server) -> None:
    refused = server.users(server.command_config("bob", PASSWORDS["bob"]), "set", "mallory", stdin="x\n")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr


def test_a_wrong_admin_password_fails_to_log_in(server: Server) -> None:
    failed = server.users(server.command_config("admin", "not-it"), "list")
    assert failed.returncode == 1 and "refused" in failed.stderr and "not-it" not in failed.stderr


def test_an_unusable_command_config_is_named(server: Server, tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nssl.truststore.location={server.ca}\n")
    failed = server.users(config, "list")
    assert failed.returncode == 2 and "sasl.jaas.config" in failed.stderr
