"""Passwords never on a server's command line, which every local user reads (``ps``, /proc/PID/cmdline) for
as long as it runs: the first SCRAM users come from a file (``--add-scram-file``) or the environment
(``--add-scram-env``), and can log in; ``--add-scram`` and an ``--override`` holding a password are
refused before anything starts, saying where the secret goes instead and without repeating it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.server_process import REPO_ROOT, ServerProcess, add_scram_args

pytestmark = pytest.mark.timeout(120)

PASSWORD = "never-in-ps-7f3a"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def scram_listener(home: Path) -> list[str]:
    properties = home / "server.properties"
    properties.write_text("listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0\n"
                          "sasl.enabled.mechanisms=SCRAM-SHA-256\n"
                          f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}\n")
    return ["--config", str(properties)]


def command_line(server: ServerProcess) -> str:
    assert server.proc is not None
    return Path(f"/proc/{server.proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def logs_in(server: ServerProcess, user: str, password: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.ports['kafka:SASL_PLAINTEXT']}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": user, "sasl.password": password})
    try:
        admin.list_topics(timeout=5)
        return True
    except Exception:  # noqa: BLE001 - librdkafka's authentication failure, or a timeout after it
        return False


def test_first_users_from_a_file_or_the_environment_log_in_and_stay_out_of_ps(tmp_path: Path) -> None:
    from_file = add_scram_args(tmp_path, f"SCRAM-SHA-256=[name=filed,password={PASSWORD}]")
    from_env = {"FIRST_SCRAM_USERS": f"# the operator's note\nSCRAM-SHA-256=[name=env,password={PASSWORD}]\n"}
    server = ServerProcess(str(tmp_path / "data"), *scram_listener(tmp_path), *from_file,
                           "--add-scram-env", "FIRST_SCRAM_USERS", env=from_env).start()
    try:
        assert "--add-scram-file" in command_line(server) and PASSWORD not in command_line(server)
        assert logs_in(server, "filed", PASSWORD) and logs_in(server, "env", PASSWORD)
        assert not logs_in(server, "filed", "wrong")
        assert not any(PASSWORD in line for line in server.output)
    finally:
        server.kill()


def serve(*flags: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "millrace", "serve", "--data-dir", str(tmp_path / "data"),
                           "--kafka-port", "0", "--native-port", "0", "--http-port", "0", *flags],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


def test_a_password_on_the_command_line_is_refused(tmp_path: Path) -> None:
    refused = serve("--add-scram", f"SCRAM-SHA-256=[name=admin,password={PASSWORD}]", tmp_path=tmp_path)
    assert refused.returncode == 2
    assert "--add-scram-file" in refused.stderr and "--add-scram-env" in refused.stderr
    assert PASSWORD not in refused.stdout + refused.stderr
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="{PASSWORD}";'
    refused = serve("--override", "listeners=SASL_PLAINTEXT://127.0.0.1:0", "--override",
                    "sasl.enabled.mechanisms=PLAIN", "--override",
                    f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}", tmp_path=tmp_path)
    assert refused.returncode == 2
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config holds a secret" in refused.stderr
    assert "--config" in refused.stderr and PASSWORD not in refused.stdout + refused.stderr
    assert not (tmp_path / "data").exists(), "refused before the store starts"


def test_an_unreadable_users_file_is_named_without_its_text(tmp_path: Path) -> None:
    missing = serve("--add-scram-file", str(tmp_path / "absent"), tmp_path=tmp_path)
    assert missing.returncode == 2 and f"--add-scram-file {tmp_path / 'absent'}: cannot be read" in missing.stderr
    bad = tmp_path / "bad-users"
    bad.write_text(f"SCRAM-SHA-256=[name=admin,{PASSWORD}]\n")
    refused = serve("--add-scram-file", str(bad), tmp_path=tmp_path)
    assert refused.returncode == 2 and f"--add-scram-file {bad}, line 1" in refused.stderr
    assert PASSWORD not in refused.stdout + refused.stderr
