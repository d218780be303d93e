"""What features cost the data path, each measured against the same server without them in one run.

- ``console``: Kafka produce and fetch with the web console open and polling (headless Chromium, the
  system ``/usr/bin/chromium`` driven by Playwright, three pages each polling the JSON API every 2 s)
  against closed, rounds alternating on one server; the server's CPU idle and under traffic, the
  browser's. Then the console's always-on history: an idle server with --topics topics and consumer
  groups and --reader-groups native reader groups, its CPU over --idle-seconds (the 5-s sampler and
  its saves), what one save takes and what the saved files hold once the ring is full.
- ``security``: the same produce-then-consume (librdkafka, 1 KiB, 8 partitions, acks=all, idempotent)
  through PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) listeners of one server per round, in rotating
  order; native event writers on a PLAINTEXT and a ``NATIVE:SSL`` server, alternating; and the
  replicated log over plain and CURVE replica links (3 logds each, write quorum 3, ack quorum 2).
  Ratios are the median of each round's own ratio, so drift in the machine's speed falls on both sides.
- ``compaction``: a compaction round over --records records of --keys keys, and single-record produce
  latency before and while rounds run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import trustme
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.clients import native_case
from benchmarks.floor import LogRun, measure
from benchmarks.harness import (
    Replicas,
    Scenario,
    ServerProcess,
    cpu_seconds,
    create_topics,
    machine_floors,
    server_pid,
)
from millrace.client.manager import StreamManager
from millrace.gateway.http.console import HISTORY_DIR
from millrace.gateway.http.console.history import FILES, SAMPLES_KEPT, HistoryFiles, read_saved
from millrace.protocol.records import NewRecord, build_record_batch
from millrace.store.durablelog.curve import CurveClientKeys, create_cluster_keys
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.durablelog.local import FileDurableDataLog
from tests.kafka.test_admin_wire import SET, incremental
from tests.kafka.test_admin_wire import TOPIC as TOPIC_RESOURCE
from tests.kafka.wire import KafkaWire, local
from tests.server_process import add_scram_args
from tests.tls_files import make_certificates

# -- console -------------------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
CONSOLE_TOPIC, GROUP, PARTITIONS = "bench", "bench-readers", 8
IDLE_SECONDS = 10.0


def browser_cpu() -> float:
    """CPU seconds used so far by the Chromium processes this benchmark started (0 when none run)."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name().startswith("chrom"):
                t = child.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue  # exited meanwhile
    return total


def produce(server: ServerProcess, n: int, size: int) -> float:
    """Seconds to produce ``n`` records of ``size`` bytes, every one acknowledged."""
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 256 * 1024, "queue.buffering.max.messages": 1_000_000})
    value = b"v" * size
    failed: list[Any] = []
    began = time.monotonic()
    for i in range(n):
        while True:
            try:
                producer.produce(CONSOLE_TOPIC, value, key=str(i % 1024).encode(),
                                 on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"produce failed: {failed[:3]}")
    return time.monotonic() - began


def consume(server: ServerProcess, n: int) -> float:
    """Seconds for one consumer of the group to fetch ``n`` more records, from its committed offsets
    (assigned, not subscribed: no rebalance in the timing), committing them at the end."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 50 * 1024 * 1024, "enable.auto.commit": False})
    began = time.monotonic()
    consumer.assign([TopicPartition(CONSOLE_TOPIC, p) for p in range(PARTITIONS)])
    got = 0
    while got < n:
        if time.monotonic() - began > 180:
            raise RuntimeError(f"consumed only {got} of {n}")
        got += sum(1 for msg in consumer.consume(10_000, 1.0) if msg.error() is None)
    elapsed = time.monotonic() - began
    consumer.commit(asynchronous=False)
    consumer.close()
    return elapsed


class OpenConsole:
    """Chromium showing three console pages, polling, and the number of API requests they made."""

    def __init__(self, server: ServerProcess, profile: str) -> None:
        from playwright.sync_api import sync_playwright

        self.playwright = sync_playwright().start()
        self.context = self.playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        self.requests = 0
        base = f"http://127.0.0.1:{server.http_port}/"
        self.pages = []
        for route in ("#/overview", f"#/stream/kafka/{CONSOLE_TOPIC}", f"#/group/{GROUP}"):
            page = self.context.new_page()
            page.on("request", self._count)
            page.goto(base + route)
            self.pages.append(page)
        self.began = time.monotonic()

    def _count(self, request: Any) -> None:
        if "/api/" in request.url:
            self.requests += 1

    def pump(self) -> None:
        """Let Playwright deliver its events (the sync API handles them only while it is called)."""
        self.pages[0].wait_for_timeout(1)

    def close(self) -> float:
        rate = self.requests / (time.monotonic() - self.began)
        self.context.close()
        self.playwright.stop()
        return rate


def console_polling(messages: int, size: int, rounds: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {"closed": [], "open": []}
    request_rates: list[float] = []
    load = [round(os.getloadavg()[0], 2)]
    with tempfile.TemporaryDirectory(prefix="console-cost-") as tmp:
        server = ServerProcess(f"{tmp}/data").start()
        try:
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            admin.create_topics([NewTopic(CONSOLE_TOPIC, PARTITIONS, 1, config={"millrace.segments.initial": "2"})]
                                )[CONSOLE_TOPIC].result(30)
            produce(server, 1000, size)  # warm up: topic loaded, group created
            consume(server, 1000)
            proc = psutil.Process(server.proc.pid if server.proc else 0)
            for r in range(rounds * 2):
                condition = "closed" if r % 2 == 0 else "open"
                console = OpenConsole(server, f"{tmp}/profile-{r}") if condition == "open" else None
                if console is not None:
                    time.sleep(3)  # the pages are loaded and polling
                idle = proc.cpu_times()
                time.sleep(IDLE_SECONDS)  # no traffic: what the console alone costs the server
                cpu = proc.cpu_times()
                idle_cpu = (cpu.user + cpu.system) - (idle.user + idle.system)
                browser_before = browser_cpu()
                produce_s = produce(server, messages, size)
                fetch_s = consume(server, messages)
                cpu_after = proc.cpu_times()
                browser_s = browser_cpu() - browser_before
                if console is not None:
                    console.pump()
                    request_rates.append(console.close())
                mb = messages * size / 1e6
                results[condition].append({
                    "produce_mb_s": mb / produce_s, "produce_msgs_s": messages / produce_s,
                    "fetch_mb_s": mb / fetch_s, "fetch_msgs_s": messages / fetch_s,
                    "server_cpu_s": (cpu_after.user + cpu_after.system) - (cpu.user + cpu.system),
                    "idle_server_cpu_percent": 100 * idle_cpu / IDLE_SECONDS,
                    "browser_cpu_s": browser_s})
                print(f"round {r + 1} ({condition}): " + ", ".join(
                    f"{k} {v:.1f}" for k, v in results[condition][-1].items()), flush=True)
        finally:
            server.stop()
    summary: dict[str, Any] = {
        c: {k: round(statistics.median(x[k] for x in rows), 2) for k in rows[0]} for c, rows in results.items()}
    summary["open"]["console_api_requests_per_s"] = round(statistics.median(request_rates), 2)
    # Each open round against the closed round just before it: the machine's load drifts (other work on
    # it), and neighbours share most of it.
    summary["open_over_closed_paired_median"] = {
        k: round(statistics.median(o[k] / c[k] for c, o in zip(results["closed"], results["open"], strict=True)), 3)
        for k in ("produce_mb_s", "fetch_mb_s", "server_cpu_s")}
    summary["load_average_1m"] = {"start": load[0], "end": round(os.getloadavg()[0], 2)}
    summary["setup"] = {"messages": messages, "size": size, "rounds_per_condition": rounds,
                        "partitions": PARTITIONS, "segments": 2}
    return summary


def populate(server: ServerProcess, topics: int, reader_groups: int) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    names = [f"t{i:04}" for i in range(topics)]
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    for n in names:
        for j in range(10):
            producer.produce(n, b"x" * 100, partition=0, key=str(j).encode())
    assert producer.flush(60) == 0
    for n in names:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{n}", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(n, 0, 3)], asynchronous=False)
        consumer.close()
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("bench")
        for i in range(reader_groups):
            sm.create_stream("bench", f"s{i}", initial_segments=2)
            with sm.create_writer("bench", f"s{i}") as writer:
                for j in range(10):
                    writer.write_event(b"e" * 100, routing_key=str(j)).result()
            sm.create_reader_group(f"rg{i}", "bench", f"s{i}").close()


def console_history(topics: int, reader_groups: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        server = ServerProcess(os.path.join(data, "data")).start()
        try:
            populate(server, topics, reader_groups)
            assert server.proc is not None
            proc = psutil.Process(server.proc.pid)
            time.sleep(10)  # the set-up's own work settles, and a first save happens
            before = proc.cpu_times()
            time.sleep(seconds)
            after = proc.cpu_times()
            cpu_s = (after.user + after.system) - (before.user + before.system)
            directory = os.path.join(server.data_dir, HISTORY_DIR)
            samples = read_saved(directory)
            size = sum(os.path.getsize(os.path.join(directory, n)) for n in FILES
                       if os.path.exists(os.path.join(directory, n)))
        finally:
            server.kill()
        newest = samples[-1]
        files = HistoryFiles(os.path.join(data, "ring"))
        times = []
        for _ in range(SAMPLES_KEPT + 50):  # past a full ring: the files switch once
            start = time.perf_counter()
            files.append([newest, newest])
            times.append(time.perf_counter() - start)
        ring_bytes = sum(os.path.getsize(files.path(i)) for i in range(len(FILES)))
        return {"topics": topics, "consumer_groups": topics, "reader_groups": reader_groups, "idle_seconds": seconds,
                "server_cpu_percent": round(100 * cpu_s / seconds, 2), "samples_saved": len(samples),
                "saved_bytes": size, "sample_bytes": len(json.dumps(newest.to_json(), separators=(",", ":"))),
                "groups_in_newest_sample": len(newest.group_lag),
                "reader_groups_in_newest_sample": len(newest.reader_group_unread),
                "save_ms_median": round(1000 * statistics.median(times), 2),
                "save_ms_max": round(1000 * max(times), 2), "files_bytes_after_full_rings": ring_bytes}


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per condition (alternating)")
    parser.add_argument("--topics", type=int, default=100, help="topics and consumer groups of the history part")
    parser.add_argument("--reader-groups", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--parts", default="polling,history", help="of polling,history")


def run_console(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        result: dict[str, Any] = {"floors": machine_floors(scratch, loopback=False)}
    parts = args.parts.split(",")
    if "polling" in parts:
        result["polling"] = console_polling(args.messages, args.size, args.rounds)
        print(json.dumps(result["polling"], indent=1), flush=True)
    if "history" in parts:
        result["history"] = console_history(args.topics, args.reader_groups, args.idle_seconds)
        print(json.dumps(result["history"], indent=1), flush=True)
    return result


# -- security ------------------------------------------------------------------------------------------

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


def produce_then_consume(server: ServerProcess, conf: dict, topic: str, messages: int, size: int, partitions: int,
                         compression: str = "none") -> dict:
    """Produce ``messages`` of ``size`` bytes round-robin over the topic's partitions as fast as librdkafka
    can (acks=all, idempotent, linger 5 ms), then consume them all back; rates and the server's CPU
    seconds per million messages of each phase. ``conf`` is the clients' connection settings."""
    admin = AdminClient(conf)  # held: a collected client ends its requests unanswered
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({
        **conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1 << 20,
        "compression.type": compression, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
    })
    payload = os.urandom(size)
    errors = [0]

    def delivered(err, msg) -> None:  # noqa: ANN001 - librdkafka callback
        if err is not None:
            errors[0] += 1

    cpu0 = cpu_seconds(server_pid(server))
    t0 = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, payload, key=str(i).encode(), partition=i % partitions,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    produce_s = time.perf_counter() - t0
    produce_cpu = cpu_seconds(server_pid(server)) - cpu0

    consumer = Consumer({**conf, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 10 << 20})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    cpu1 = cpu_seconds(server_pid(server))
    t1 = time.perf_counter()
    while got < messages and time.perf_counter() - t1 < 120:
        for m in consumer.consume(10000, 1.0):
            if m.error() is None:
                got += 1
    consume_s = time.perf_counter() - t1
    consume_cpu = cpu_seconds(server_pid(server)) - cpu1
    consumer.close()
    return {
        "produce_msgs_per_s": messages / produce_s,
        "produce_mb_per_s": messages * size / produce_s / 1e6,
        "server_cpu_s_per_million": produce_cpu / messages * 1e6,
        "consume_msgs_per_s": got / consume_s,
        "consume_mb_per_s": got * size / consume_s / 1e6,
        "consume_cpu_s_per_million": consume_cpu / max(got, 1) * 1e6,
        "consumed": got,
        "errors": errors[0],
    }


def kafka_security(messages: int, size: int, partitions: int, rounds_wanted: int) -> dict[str, dict[str, float]]:
    """``produce_then_consume`` through each protocol of one fresh server per round, in rotating order."""
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(rounds_wanted):
        home = Path(tempfile.mkdtemp(prefix="millrace-secbench-"))
        server, ca = start_server(home)
        try:
            order = PROTOCOLS[r % 3:] + PROTOCOLS[:r % 3]
            rounds.append({p: produce_then_consume(server, client_config(server, p, ca), f"bench-{p.lower()}-{r}",
                                                   messages, size, partitions) for p in order})
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
    print(f"{'protocol':>10} {'prod msg/s':>11} {'MB/s':>7} {'cpu s/M':>8} {'cons msg/s':>11} {'MB/s':>7} "
          f"{'cons cpu':>8} {'prod/PT':>8} {'cons/PT':>8} {'cpu/PT':>7} {'errors':>6}")
    for protocol, m in summary.items():
        print(f"{protocol:>10} {m['produce_msgs_per_s']:>11.0f} {m['produce_mb_per_s']:>7.1f} "
              f"{m['server_cpu_s_per_million']:>8.2f} {m['consume_msgs_per_s']:>11.0f} {m['consume_mb_per_s']:>7.1f} "
              f"{m['consume_cpu_s_per_million']:>8.2f} {m['produce_msgs_per_s_vs_plaintext']:>8.2f} "
              f"{m['consume_msgs_per_s_vs_plaintext']:>8.2f} {m['server_cpu_s_per_million_vs_plaintext']:>7.2f} "
              f"{m['errors'] + messages - m['consumed']:>6.0f}")
    print(f"medians of {rounds_wanted} rounds, {messages} messages of {size} B over {partitions} "
          "partitions, acks=all, idempotent, linger 5 ms; X/PT = the median of each round's ratio to PLAINTEXT")
    return summary




NATIVE_TLS_CASES = ((1024, 1), (1024, 16), (100, 16))  # (event bytes, writers)
NATIVE_PARTITIONS = 8


def native_tls(events: int, rounds: int) -> dict[str, dict[str, float]]:
    """Native writers (unkeyed, 8 partitions) against a PLAINTEXT and a ``NATIVE:SSL`` server, the order
    alternating round by round; medians and the median of the rounds' SSL / PLAINTEXT ratios."""
    table: dict[str, dict[str, float]] = {}
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
                                                                      for case in NATIVE_TLS_CASES}
            count = 0
            for round_index in range(rounds):
                order = list(targets) if round_index % 2 == 0 else list(reversed(targets))
                for size, writers in NATIVE_TLS_CASES:
                    for name in order:
                        server, uri, options = targets[name]
                        topic = f"tls-bench-{count}"
                        count += 1
                        create_topics(server.bootstrap, [topic], NATIVE_PARTITIONS)
                        run = native_case(uri, topic, events, size, writers, False, options)
                        results[(size, writers)][name].append(float(run["events_per_s"]))
            print(f"{'case':<16}{'PLAINTEXT ev/s':>16}{'SSL ev/s':>12}{'SSL/PT':>8}")
            for (size, writers), by_name in results.items():
                ratio = statistics.median(t / p for t, p in zip(by_name["SSL"], by_name["PLAINTEXT"], strict=True))
                table[f"{size} B x{writers}"] = {"plaintext_events_per_s": statistics.median(by_name["PLAINTEXT"]),
                                                 "ssl_events_per_s": statistics.median(by_name["SSL"]),
                                                 "ssl_over_plaintext": ratio}
                print(f"{f'{size} B x{writers}':<16}{statistics.median(by_name['PLAINTEXT']):>16.0f}"
                      f"{statistics.median(by_name['SSL']):>12.0f}{ratio:>8.2f}")
            print(f"medians of {rounds} rounds, {events} events per case and run, unkeyed, "
                  f"{NATIVE_PARTITIONS} partitions; SSL/PT: the median of each round's ratio")
    return table




def curve_cost(seconds: float, runs: int) -> dict[str, dict[str, float]]:
    """The file log, the replicated log and the same over CURVE, alternating, medians of ``runs``."""
    with tempfile.TemporaryDirectory(prefix="millrace-curve-") as tmp:
        root = Path(tmp)
        replicas = Replicas(root / "replicas", 3).start()
        keys = create_cluster_keys(root / "keys")
        curve = CurveClientKeys.load(keys["node_secret"], keys["logd_public"])
        curve_replicas = Replicas(root / "curve-replicas", 3, "--curve-secret-key", str(keys["logd_secret"]),
                                  "--curve-authorized-keys", str(keys["node_public"].parent)).start()
        opened: dict[str, Callable[[str], DurableDataLog]] = {
            "file": lambda name: FileDurableDataLog(str(root / "file" / name)),
            "replicated 3/3/2": lambda name: replicas.log(name),
            "CURVE 3/3/2": lambda name: curve_replicas.log(name, curve=curve),
        }
        table: dict[str, dict[str, float]] = {}
        try:
            print(f"{'log':<18}{'entry':>7}{'thr':>5}{'win':>5}{'appends/s':>12}{'MB/s':>9}{'p50 ms':>9}{'p99 ms':>9}")
            for entry_bytes, appenders, window in ((1024, 1, 1), (1024, 4, 16), (65536, 4, 4)):
                results: dict[str, list[LogRun]] = {kind: [] for kind in opened}
                for run in range(runs):
                    for kind, make in opened.items():
                        log = make(f"{kind.split()[0]}-{entry_bytes}-{appenders}-{window}-{run}")
                        log.open()
                        try:
                            results[kind].append(measure(log, entry_bytes, appenders, window, seconds))
                        finally:
                            log.close()
                for kind, kind_runs in results.items():
                    med = {field: statistics.median(getattr(r, field) for r in kind_runs)
                           for field in ("appends_per_s", "mb_per_s", "p50_ms", "p99_ms")}
                    table[f"{kind} {entry_bytes} B {appenders}x{window}"] = med
                    print(f"{kind:<18}{entry_bytes:>7}{appenders:>5}{window:>5}{med['appends_per_s']:>12.0f}"
                          f"{med['mb_per_s']:>9.1f}{med['p50_ms']:>9.2f}{med['p99_ms']:>9.2f}")
        finally:
            replicas.close()
            curve_replicas.close()
        return table


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=200_000, help="Kafka messages per protocol and round")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=20_000, help="native events per case and round")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of each replicated-log run")
    parser.add_argument("--parts", default="kafka,native,curve", help="of kafka,native,curve")


def run_security(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        result: dict[str, Any] = {"floors": machine_floors(scratch, loopback=False)}
    parts = args.parts.split(",")
    if "kafka" in parts:
        result["kafka"] = kafka_security(args.messages, args.size, args.partitions, args.rounds)
    if "native" in parts:
        result["native"] = native_tls(args.events, args.rounds)
    if "curve" in parts:
        result["curve"] = curve_cost(args.seconds, args.rounds)
    return result


# -- compaction ----------------------------------------------------------------------------------------

_ROUND = re.compile(r"compacted .* below offset (\d+): (\d+) of (\d+) records kept in ([\d.]+) s")


class _InfoServer(ServerProcess):
    def command(self) -> list[str]:
        return [a if a != "WARNING" else "INFO" for a in super().command()]


def _latencies(w: KafkaWire, seconds: float) -> list[float]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        w.produce("bench", 0, build_record_batch([NewRecord(b"probe", b"y")]))
        out.append((time.perf_counter() - started) * 1000)
        time.sleep(0.005)
    return sorted(out)


def _summary(lat: list[float]) -> dict[str, float]:
    return {"p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99)], "max_ms": lat[-1]}


def compaction_once(records: int, keys: int, measure_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        server = _InfoServer(data, "--retention-check-seconds", "1").start()
        try:
            w = local(server.kafka_port)
            w.create("bench", 1, cleanup_policy="delete", min_cleanable_dirty_ratio="0.01",
                     file_delete_delay_ms="1000")
            for i in range(0, records, 100):
                w.produce("bench", 0, build_record_batch(
                    [NewRecord(f"key{(i + j) % keys}".encode(), b"x" * 100) for j in range(100)]))
            idle = _latencies(w, measure_s)
            assert incremental(w, 1, TOPIC_RESOURCE, "bench", [("cleanup.policy", SET, "compact")]).error_code == 0
            during = _latencies(w, measure_s * 3)
            deadline = time.monotonic() + 60
            first = None
            while first is None and time.monotonic() < deadline:
                first = next((m for m in map(_ROUND.search, server.output) if m and int(m.group(3)) >= records),
                             None)
                time.sleep(0.2)
            assert first is not None, "the first round did not finish"
            seconds = float(first.group(4))
            return {"round_s": seconds, "round_records_per_s": int(first.group(3)) / seconds,
                    "kept": int(first.group(2)), "idle": _summary(idle), "during": _summary(during)}
        finally:
            server.kill()


def add_compaction_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--measure-seconds", type=float, default=4.0)


def run_compaction(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        floors = machine_floors(scratch, loopback=False)
    runs = [compaction_once(args.records, args.keys, args.measure_seconds) for _ in range(args.runs)]

    def median(*path: str) -> float:
        values = []
        for r in runs:
            v: Any = r
            for part in path:
                v = v[part]
            values.append(v)
        return round(statistics.median(values), 2)

    result = {
        "floors": floors, "records": args.records, "keys": args.keys, "runs": args.runs,
        "first_round_s": median("round_s"), "first_round_records_per_s": median("round_records_per_s"),
        "produce_idle": {k: median("idle", k) for k in ("p50_ms", "p99_ms", "max_ms")},
        "produce_during_compaction": {k: median("during", k) for k in ("p50_ms", "p99_ms", "max_ms")},
    }
    print(json.dumps(result, indent=2))
    return result


SCENARIOS = [
    Scenario("console", "the web console open and polling against closed; its always-on history on an idle "
             "server", add_console_arguments, run_console, __doc__ or ""),
    Scenario("security", "PLAINTEXT, SSL and SASL_SSL Kafka listeners; native TLS; CURVE replica links",
             add_security_arguments, run_security, __doc__ or ""),
    Scenario("compaction", "a log compaction round's time, and produce latency while rounds run",
             add_compaction_arguments, run_compaction, __doc__ or ""),
]
