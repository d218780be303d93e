"""Credentials at rest: the SCRAM credential table is a table segment, so its entries are written wherever
segment data is: the server's durable log files, its checkpoints and long-term storage chunks, and on
replicated logs the log replicas' journals. A real server (and a real logd) writes them here, through a
Kafka admin client's AlterUserScramCredentials, and every file they hold must be its owner's alone (0600,
directories 0700), a data directory left 0755 by an earlier version included."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

from tests.durablelog.logd_process import LogdProcess
from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(120)

USER = "at-rest-auditor"  # stored in the table's key, so the files holding the credential can be found


def add_scram_user(server: ServerProcess) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"auditor-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def modes(root: Path) -> dict[str, int]:
    """Every directory's and file's permission bits under ``root`` (itself included), by relative path."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def holding(root: Path, needle: bytes) -> list[str]:
    """The files under ``root`` whose bytes contain ``needle``."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*")
                  if path.is_file() and needle in path.read_bytes())


def assert_private(root: Path) -> None:
    shared = {path: oct(mode) for path, mode in modes(root).items() if mode & 0o077}
    assert not shared, f"readable by others under {root}: {shared}"


def test_the_data_dir_holding_scram_credentials_is_the_owners_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)  # as an earlier version left it: tightened at start
    os.chmod(data, 0o755)
    server = ServerProcess(str(data)).start()
    try:
        add_scram_user(server)
        assert server.stop(signal.SIGTERM) == 0  # flushed to long-term storage and checkpointed
    finally:
        server.kill()
    # The credential reached the durable log and the long-term storage chunks, both under the data dir.
    written = holding(data, USER.encode())
    assert any(p.startswith("logs/") for p in written) and any(p.startswith("lts/") for p in written), written
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert_private(data)


def test_a_log_replicas_journal_holding_scram_credentials_is_the_owners_alone(tmp_path: Path) -> None:
    logd = LogdProcess(str(tmp_path / "logd")).start()
    try:
        server = ServerProcess(str(tmp_path / "data"), "--containers", "1", "--log-replicas", logd.address,
                               "--write-quorum", "1", "--ack-quorum", "1").start()
        try:
            add_scram_user(server)
            assert server.stop(signal.SIGTERM) == 0
        finally:
            server.kill()
        assert logd.stop(signal.SIGTERM) == 0
    finally:
        logd.kill()
    journal = tmp_path / "logd"
    assert any(p.endswith(".journal") for p in holding(journal, USER.encode())), "the credential reached the journal"
    assert_private(journal)
    assert_private(tmp_path / "data")
