"""What TLS costs native event writers: the same cases on two servers in one run, one with a PLAINTEXT
native listener and one with ``NATIVE:SSL`` (a test CA's certificate, TLS 1.2+), in alternating order
round by round so drift falls on both. Cases: 1 KiB events from 1 and 16 writers, 100 B events from 16
writers, each to a fresh 8-partition topic (``benchmarks.native_client_bench.native_case``). Prints the
medians and, per case, the median of each round's TLS/PLAINTEXT ratio.

    .venv/bin/python -m benchmarks.native_tls_bench [--events 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.native_client_bench import PARTITIONS, native_case
from tests.server_process import ServerProcess
from tests.tls_files import make_certificates

CASES = ((1024, 1), (1024, 16), (100, 16))  # (event bytes, writers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000, help="events per case and run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        certificates = make_certificates(Path(home))
        properties = Path(home) / "server.properties"
        properties.write_text("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,NATIVE:SSL\n"
                              f"ssl.keystore.type=PEM\nssl.keystore.location={certificates.server_pem}\n")
        with ServerProcess(str(Path(home) / "plain")) as plain, \
                ServerProcess(str(Path(home) / "tls"), "--config", str(properties)) as tls:
            targets = {"PLAINTEXT": (plain, f"tcp://127.0.0.1:{plain.native_port}", {}),
                       "SSL": (tls, f"tls://127.0.0.1:{tls.native_port}", {"ca_file": str(certificates.ca_pem)})}
            results: dict[tuple[int, int], dict[str, list[float]]] = {case: {"PLAINTEXT": [], "SSL": []}
                                                                      for case in CASES}
            count = 0
            for round_index in range(args.rounds):
                order = list(targets) if round_index % 2 == 0 else list(reversed(targets))
                for size, writers in CASES:
                    for name in order:
                        server, uri, options = targets[name]
                        topic = f"tls-bench-{count}"
                        count += 1
                        admin = AdminClient({"bootstrap.servers": server.bootstrap})
                        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                        run = native_case(uri, topic, args.events, size, writers, False, options)
                        results[(size, writers)][name].append(float(run["events_per_s"]))
            print(f"{'case':<16}{'PLAINTEXT ev/s':>16}{'SSL ev/s':>12}{'SSL/PT':>8}")
            for (size, writers), by_name in results.items():
                ratio = statistics.median(t / p for t, p in zip(by_name["SSL"], by_name["PLAINTEXT"], strict=True))
                print(f"{f'{size} B x{writers}':<16}{statistics.median(by_name['PLAINTEXT']):>16.0f}"
                      f"{statistics.median(by_name['SSL']):>12.0f}{ratio:>8.2f}")
            print(f"medians of {args.rounds} rounds, {args.events} events per case and run, unkeyed, "
                  f"{PARTITIONS} partitions; SSL/PT: the median of each round's ratio")


if __name__ == "__main__":
    main()
