"""What security costs: produce and consume through PLAINTEXT, SSL and SASL_SSL listeners of one server.

Each round starts a fresh ``millrace serve`` with three Kafka listeners (PLAINTEXT; SSL; SASL_SSL with
SCRAM-SHA-512), certificates from a throwaway CA (trustme), and runs the same case through each
listener in turn, in a rotating order (drift in the machine's speed falls on every protocol alike): an
idempotent acks=all librdkafka producer (linger 5 ms) writes N messages to a new topic, then a
consumer reads them back. Reports per protocol the medians over the rounds of produce and consume
msgs/s and MB/s and the server's CPU seconds per million messages, and each protocol's ratio to
PLAINTEXT taken within each round (the median of those ratios).

    .venv/bin/python -m benchmarks.security_bench [--messages 200000] [--size 1024] [--partitions 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import trustme

from benchmarks.kafka_bench import produce_then_consume
from tests.server_process import ServerProcess, add_scram_args

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"


def start_server(home: Path) -> tuple[ServerProcess, Path]:
    """A server with the three listeners, and the CA file clients trust."""
    ca = trustme.CA()
    server_pem, ca_pem = home / "server.pem", home / "ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    properties = home / "server.properties"
    properties.write_text("\n".join([
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
    ]) + "\n")
    server = ServerProcess(str(home / "data"), "--config", str(properties),
                           *add_scram_args(home, f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]")).start()
    return server, ca_pem


def client_config(server: ServerProcess, protocol: str, ca: Path) -> dict[str, Any]:
    port = server.ports["kafka" if protocol == "PLAINTEXT" else f"kafka:{protocol}"]
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol}
    if protocol != "PLAINTEXT":
        conf["ssl.ca.location"] = str(ca)
    if protocol.startswith("SASL"):
        conf |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}
    return conf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        home = Path(tempfile.mkdtemp(prefix="millrace-secbench-"))
        server, ca = start_server(home)
        try:
            order = PROTOCOLS[r % 3:] + PROTOCOLS[:r % 3]
            rounds.append({p: produce_then_consume(server, client_config(server, p, ca), f"bench-{p.lower()}-{r}",
                                                   args.messages, args.size, args.partitions) for p in order})
        finally:
            server.kill()
            shutil.rmtree(home, ignore_errors=True)
    summary = {}
    for protocol in PROTOCOLS:
        runs = [rnd[protocol] for rnd in rounds]
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        for key in ("produce_msgs_per_s", "consume_msgs_per_s", "server_cpu_s_per_million"):
            med[f"{key}_vs_plaintext"] = statistics.median(rnd[protocol][key] / rnd["PLAINTEXT"][key] for rnd in rounds)
        summary[protocol] = med
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{'protocol':>10} {'prod msg/s':>11} {'MB/s':>7} {'cpu s/M':>8} {'cons msg/s':>11} {'MB/s':>7} "
          f"{'cons cpu':>8} {'prod/PT':>8} {'cons/PT':>8} {'cpu/PT':>7} {'errors':>6}")
    for protocol, m in summary.items():
        print(f"{protocol:>10} {m['produce_msgs_per_s']:>11.0f} {m['produce_mb_per_s']:>7.1f} "
              f"{m['server_cpu_s_per_million']:>8.2f} {m['consume_msgs_per_s']:>11.0f} {m['consume_mb_per_s']:>7.1f} "
              f"{m['consume_cpu_s_per_million']:>8.2f} {m['produce_msgs_per_s_vs_plaintext']:>8.2f} "
              f"{m['consume_msgs_per_s_vs_plaintext']:>8.2f} {m['server_cpu_s_per_million_vs_plaintext']:>7.2f} "
              f"{m['errors'] + args.messages - m['consumed']:>6.0f}")
    print(f"medians of {args.rounds} rounds, {args.messages} messages of {args.size} B over {args.partitions} "
          "partitions, acks=all, idempotent, linger 5 ms; X/PT = the median of each round's ratio to PLAINTEXT")


if __name__ == "__main__":
    main()
