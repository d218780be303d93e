"""``millrace serve``'s flags become ``ServerOptions`` field by field, by name (gateway/commands/cli.py); Twisted's own
warnings reach the server's log."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from millrace.gateway.commands.cli import _serve_parser, server_options
from millrace.gateway.shared.options import ServerOptions
from tests.server_process import REPO_ROOT


def parse_serve(*flags: str) -> ServerOptions:
    parser = argparse.ArgumentParser()
    _serve_parser(parser.add_subparsers(dest="command", required=True))
    return server_options(parser.parse_args(["serve", *flags]))


def test_the_flags_default_to_the_options_defaults() -> None:
    assert parse_serve() == ServerOptions()


def test_every_option_has_its_flag() -> None:
    options = parse_serve(
        "--data-dir", "/d", "--host", "0.0.0.0", "--kafka-port", "1", "--native-port", "2", "--http-port", "3",
        "--containers", "8", "--lts", "s3://b/p", "--s3-endpoint", "http://s3", "--cache-mb", "5",
        "--connection-budget-mb", "6", "--container-budget-mb", "7", "--kafka-scope", "k",
        "--no-auto-create-topics", "--default-partitions", "9", "--scale-windows", "1,5",
        "--scale-interval-seconds", "0.5", "--scale-cooldown-seconds", "4", "--retention-check-seconds", "11",
        "--transaction-check-seconds", "12", "--producer-id-expiration-ms", "13", "--native-txn-retention-ms", "14",
        "--log-replicas", "a:1,b:2", "--write-quorum", "2", "--ack-quorum", "1", "--zookeeper", "zk:2181/m",
        "--node-id", "3", "--peer-port", "15", "--advertised-kafka", "h:1", "--advertised-native", "h:2",
        "--advertised-peer", "h:3", "--session-timeout", "16", "--retry-bound", "17")
    assert options == ServerOptions(
        data_dir="/d", host="0.0.0.0", kafka_port=1, native_port=2, http_port=3, containers=8, lts="s3://b/p",
        s3_endpoint="http://s3", cache_mb=5, connection_budget_mb=6, container_budget_mb=7, kafka_scope="k",
        auto_create_topics=False, default_partitions=9, scale_windows=(1.0, 5.0), scale_interval_seconds=0.5,
        scale_cooldown_seconds=4, retention_check_seconds=11, transaction_check_seconds=12,
        producer_id_expiration_ms=13, native_txn_retention_ms=14, log_replicas="a:1,b:2", write_quorum=2,
        ack_quorum=1, zookeeper="zk:2181/m", node_id="3", peer_port=15, advertised_kafka="h:1",
        advertised_native="h:2", advertised_peer="h:3", session_timeout_seconds=16, retry_bound_seconds=17)


def test_the_kafka_properties_file_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """MILLRACE_CONFIG names it where a container image is configured (docker/compose.secure.yaml)."""
    monkeypatch.setenv("MILLRACE_CONFIG", "/etc/millrace/server.properties")
    assert parse_serve().config == "/etc/millrace/server.properties"
    assert parse_serve("--config", "/other").config == "/other"


TWISTED_EVENTS = """
import gc, logging
logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
from millrace.gateway.commands.cli import log_twisted_warnings
log_twisted_warnings()
from twisted.internet import defer
from twisted.logger import Logger
Logger().info("a twisted info")
Logger().warn("a twisted warning")
d = defer.fail(RuntimeError("nobody handled me"))
del d
gc.collect()
print("millrace: ready")
"""


def test_twisted_warnings_and_unhandled_errors_reach_the_servers_log() -> None:
    """Before, Twisted kept every event below critical in a start-up buffer no one reads."""
    done = subprocess.run([sys.executable, "-c", TWISTED_EVENTS], capture_output=True, text=True, timeout=60,
                          cwd=REPO_ROOT)
    assert done.stdout == "millrace: ready\n"  # standard output is not taken over by Twisted's log
    assert "WARNING twisted: a twisted warning" in done.stderr
    assert "CRITICAL twisted: Unhandled error in Deferred" in done.stderr and "nobody handled me" in done.stderr
    assert "a twisted info" not in done.stderr
