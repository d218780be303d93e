"""What hostile clients cost the server: memory under trickled large frames, CPU under hostile logins.

1. Memory. A server with the default limits; sixteen raw connections each announce a 100 MB Kafka frame
   (then sixteen a 32 MiB native frame) and send all but its last byte as fast as the server reads. The
   server's RSS before, at its peak, and ``--settle`` seconds after the hostile connections closed.
2. CPU. A server whose Kafka listener is SASL (PLAIN and SCRAM-SHA-256): a good client, logged in, sends
   ApiVersions in a loop; its median and 99th-percentile round trip alone, then while ``--hostile``
   threads log in again and again with a 500 KB SCRAM user name (from one address, and, with
   ``millrace.authentication.failures.max`` raised out of the way, with the name bound alone at work).
3. HTTP Basic. One address sends wrong passwords for ``--seconds``: how many it sent, how many were
   answered 401 (checked) and 429 (refused unchecked), and the server's CPU seconds meanwhile.

"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.harness import RssSampler, Scenario, machine_floors, server_pid
from tests.security.test_connection_limits import RawKafka, Trickler, jaas_plain
from tests.server_process import ServerProcess

MB = 1_000_000
USERS = {"alice": "alice-secret"}


def trickled_frames(home: Path, settle: float) -> dict[str, Any]:
    server = ServerProcess(str(home / "memory")).start()
    try:
        process = psutil.Process(server_pid(server))
        result: dict[str, Any] = {}
        for listener, port, announced in (("kafka", server.kafka_port, 100 * MB),
                                          ("native", server.native_port, 32 * 1024 * 1024 - 1)):
            time.sleep(1)
            before = process.memory_info().rss
            sampler = RssSampler(server_pid(server), every=0.05)
            tricklers = [Trickler(port, announced, announced - 1) for _ in range(16)]
            for trickler in tricklers:
                trickler.start()
            # Until the server stops taking bytes: what it read no longer grows for two seconds.
            last, still_since = -1, time.monotonic()
            while time.monotonic() - still_since < 2:
                sent = sum(t.sent for t in tricklers)
                if sent != last:
                    last, still_since = sent, time.monotonic()
                time.sleep(0.1)
            for trickler in tricklers:
                trickler.close()
            time.sleep(settle)
            sampler.finish()
            result[listener] = {"frames": 16, "announced_mb": round(announced / MB),
                                "client_sent_mb": round(sum(t.sent for t in tricklers) / MB),
                                "rss_mb_before": round(before / MB), "rss_mb_peak": round(sampler.peak / MB),
                                f"rss_mb_{settle:g}s_after_close": round(process.memory_info().rss / MB)}
        return result
    finally:
        server.kill()


def sasl_server(home: Path, *overrides: str) -> ServerProcess:
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.properties").write_text("\n".join([
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas_plain(USERS)}",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,HTTP:SASL_PLAINTEXT",
        "listener.name.http.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.http.plain.sasl.jaas.config={jaas_plain(USERS)}",
    ]) + "\n")
    args = [arg for override in overrides for arg in ("--override", override)]
    return ServerProcess(str(home / "data"), "--config", str(home / "server.properties"), *args).start()


def round_trips(server: ServerProcess, seconds: float) -> list[float]:
    good = RawKafka(server.kafka_port)
    assert good.login("PLAIN", f"\0alice\0{USERS['alice']}".encode()).error_code == 0
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        good.api_versions()
        times.append(time.perf_counter() - start)
        time.sleep(0.01)
    good.close()
    return times


def hostile_logins(server: ServerProcess, stop: threading.Event, count: list[int]) -> None:
    name = "q" * 500_000
    while not stop.is_set():
        with contextlib.suppress(OSError, AssertionError):
            hostile = RawKafka(server.kafka_port)
            hostile.login("SCRAM-SHA-256", f"n,,n={name},r=abcdefghijklmnop".encode())
            hostile.close()
            count[0] += 1


def latency_under_hostile_logins(home: Path, hostile: int, seconds: float, *overrides: str) -> dict[str, Any]:
    server = sasl_server(home, *overrides)
    try:
        def summary(times: list[float]) -> dict[str, float]:
            times = sorted(times)
            return {"median_ms": round(statistics.median(times) * 1000, 2),
                    "p99_ms": round(times[int(len(times) * 0.99)] * 1000, 2)}

        alone = summary(round_trips(server, seconds))
        stop, count = threading.Event(), [0]
        threads = [threading.Thread(target=hostile_logins, args=(server, stop, count), daemon=True)
                   for _ in range(hostile)]
        for thread in threads:
            thread.start()
        during = summary(round_trips(server, seconds))
        stop.set()
        for thread in threads:
            thread.join(30)
        return {"overrides": list(overrides), "good_client_alone": alone, "good_client_during": during,
                "hostile_threads": hostile, "hostile_logins": count[0]}
    finally:
        server.kill()


def http_basic_guessing(home: Path, seconds: float) -> dict[str, Any]:
    server = sasl_server(home)
    try:
        process = psutil.Process(server_pid(server))
        wrong = "Basic " + base64.b64encode(b"alice:wrong").decode()
        statuses: dict[int, int] = {}
        cpu_before = sum(process.cpu_times()[:2])
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
            connection.request("POST", "/api/streams/kafka/t/split", body=b"{}",
                               headers={"authorization": wrong, "content-type": "application/json"})
            status = connection.getresponse().status
            statuses[status] = statuses.get(status, 0) + 1
            connection.close()
        return {"seconds": seconds, "attempts": sum(statuses.values()), "answers": statuses,
                "server_cpu_s": round(sum(process.cpu_times()[:2]) - cpu_before, 2)}
    finally:
        server.kill()


def add_hostile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hostile", type=int, default=10, help="threads logging in with 500 KB SCRAM names")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the close before RSS is read")


def run_hostile(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="millrace-hostile-"))
    try:
        result = {
            "floors": machine_floors(str(home), loopback=False),
            "trickled_frames": trickled_frames(home, args.settle),
            "hostile_scram_logins": [
                latency_under_hostile_logins(home / "scram", args.hostile, args.seconds),
                latency_under_hostile_logins(home / "scram-unlimited", args.hostile, args.seconds,
                                             "millrace.authentication.failures.max=1000000000"),
            ],
            "http_basic_wrong_passwords": http_basic_guessing(home / "http", args.seconds),
        }
        print(json.dumps(result, indent=1))
        return result
    finally:
        shutil.rmtree(home, ignore_errors=True)


SCENARIOS = [Scenario("hostile", "trickled huge frames (RSS), hostile SCRAM logins and HTTP password guessing "
                      "(a good client's latency, CPU)", add_hostile_arguments, run_hostile, __doc__ or "")]
