"""docs/cluster.md's "A secured cluster", run as written: its ``sh`` blocks are
parsed out of the page and run with bash from a scratch directory standing in for the repository root
(its ``.venv`` this checkout's). Only what a test machine must change is substituted: the cluster's
directory, ``/tmp/sc`` on the page, is one of pytest's. ``cluster up --secure`` starts its own ZooKeeper
(the Debian package, as the other cluster tests use), three log replicas and three nodes on free ports;
the page's clients get in with the password ``up`` printed once: Kafka (kcat over SASL_SSL), the native
client (``tls://``, PLAIN) and HTTPS (a split refused without the login, done with it); ``cluster down``
stops everything cleanly. ``cluster keys`` makes the files the page lists, for the names it gives."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from millrace.gateway.commands.local_cluster import zookeeper_missing
from tests.server_process import REPO_ROOT

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("kcat", "curl", "jq")),
                                 reason="kcat, curl and jq are needed (scripts/bootstrap.sh installs them)")]

PAGE_DIR = "/tmp/sc"


def subsection_blocks() -> list[str]:
    text = (Path(REPO_ROOT) / "docs" / "cluster.md").read_text()
    section = text[text.index("\n## A secured cluster\n"):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


def block_running(command: str) -> str:
    found = [b for b in subsection_blocks() if re.search(rf"\.venv/bin/millrace cluster {command}\b", b)]
    assert len(found) == 1, f"the subsection's one block running `millrace cluster {command}`"
    return found[0]


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / ".venv").symlink_to(Path(REPO_ROOT) / ".venv")
    yield tmp_path


def run(block: str, workdir: Path, timeout: float) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=workdir, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"block failed:\n{block}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing()))
def test_page_secured_cluster_as_written(workdir: Path) -> None:
    directory = workdir / "sc"
    up, down = block_running("up"), block_running("down")
    assert "--secure" in up
    try:
        out = run(up.replace(PAGE_DIR, str(directory)), workdir, timeout=400)
        # kcat reads back what the admin wrote; the native client lists the stream it made and wrote to;
        # a split over HTTPS is refused without the login and done with it (two segments over the key range).
        assert out.splitlines() == [
            "hello, cluster",
            "['readings']",
            '{"error": "authentication required", "type": "AuthenticationRequired"} 401',
            "[[0,0.5],[0.5,1]]"]
        secrets = directory / "secrets"
        assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
        assert stat.S_IMODE((secrets / "admin.conf").stat().st_mode) == 0o600  # the block's own, kept as up's
        # The password is in what `up` printed, and in the two client files kept 0600; no log holds it.
        password = (secrets / "admin.conf").read_text().split("sasl.password=", 1)[1].splitlines()[0]
        assert f'password="{password}"' in (secrets / "admin.properties").read_text()
        assert not any(password in log.read_text(errors="replace") for log in directory.glob("*/out.log"))
        stopped = run(down.replace(PAGE_DIR, str(directory)), workdir, timeout=120).splitlines()
        names = ["zookeeper-1", "logd-1", "logd-2", "logd-3", "node-1", "node-2", "node-3"]
        assert sorted(line.split()[0] for line in stopped) == sorted(names), stopped
        assert not any("killed" in line or "not cleanly" in line for line in stopped), stopped
    finally:
        if (directory / "cluster.json").exists():
            subprocess.run([os.path.join(REPO_ROOT, ".venv", "bin", "millrace"), "cluster", "down", "--dir",
                            str(directory)], capture_output=True, timeout=120)


def test_page_cluster_keys_as_written(workdir: Path) -> None:
    block = block_running("keys")
    out = run(block, workdir, timeout=120)
    keys = workdir / "keys"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    # Every file the page's comments list is there (node-N.pem for each node the command names).
    nodes = dict(re.findall(r"--node (\w+)=(\S+)", block))
    assert list(nodes) == ["1", "2"]
    listed = re.findall(r"^# (keys/\S+)", block, flags=re.M)
    assert len(listed) >= 5, listed
    for path in listed:
        if path.endswith("/..."):
            made = workdir / path.removesuffix("/...")
            assert made.is_dir() and any(made.rglob("*")), path
        elif "node-N" in path:
            for node_id in nodes:
                assert (workdir / path.replace("node-N", f"node-{node_id}")).is_file(), path
        else:
            assert (workdir / path).is_file(), path
    for secret in ("tls/ca.key", "tls/node-1.pem", "tls/node-2.pem", "zookeeper.credentials"):
        assert stat.S_IMODE((keys / secret).stat().st_mode) == 0o600, secret
    # Each node's certificate is for the names the command gave it, signed by the cluster CA.
    ca = x509.load_pem_x509_certificate((keys / "tls" / "ca.pem").read_bytes())
    for node_id, names in nodes.items():
        pem = (keys / "tls" / f"node-{node_id}.pem").read_bytes()
        certificate = x509.load_pem_x509_certificates(pem)[0]
        assert certificate.issuer == ca.subject
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        given = [str(v) for v in san.get_values_for_type(x509.DNSName)]
        given += [str(v) for v in san.get_values_for_type(x509.IPAddress)]
        assert sorted(given) == sorted(names.split(",")), (node_id, given)
    # What it prints names those files (every path it prints exists) and never a secret.
    assert out.startswith("cluster keys in keys ")
    for path in set(re.findall(r"(?<![\w/])keys/[\w./-]+\w", out)):
        assert (workdir / path).exists(), f"printed {path}, which is not there:\n{out}"
    for line in (keys / "zookeeper.credentials").read_text().splitlines():
        if line.startswith("password="):
            assert line.split("=", 1)[1] not in out
    assert "PRIVATE KEY" not in out
