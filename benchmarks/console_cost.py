"""What the web console costs the data path: Kafka produce and fetch throughput with the console open and
polling vs closed, in one run against one server.

One `millrace serve` process (fresh data directory), one 8-partition topic carried by 2 segments and a
consumer group on it. Rounds alternate "closed" (no browser) and "open" (headless Chromium, the system
`/usr/bin/chromium` driven by Playwright, showing three console pages at once: the overview, the
topic's stream page with the segment heat map, and the consumer group's page, each polling the JSON API
every 2 s). Each round produces N records with
acks=all (idempotent, as clients default) as fast as librdkafka can, then the group consumes them all
back (assigned to all partitions from its committed offsets). Reported per condition: the median over
rounds of produce and fetch MB/s and msgs/s, the server's CPU seconds for them, and the server's CPU use
over 10 s without traffic before them (what the console alone costs); for the open rounds, the
console's API requests per second and the browser's own CPU seconds (it shares the machine with client and
server); and each open round against the closed round before it (median of the ratios). The console's sampling (every 5 s) runs from the
server's start whether or not a console is open, so both conditions include it: they measure the browser's polling
(``benchmarks/console_history_cost.py`` measures the sampling itself).

    .venv/bin/python -m benchmarks.console_cost [--messages 200000] [--size 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server_process import ServerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
TOPIC, GROUP, PARTITIONS = "bench", "bench-readers", 8
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
                producer.produce(TOPIC, value, key=str(i % 1024).encode(),
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
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
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
        for route in ("#/overview", f"#/stream/kafka/{TOPIC}", f"#/group/{GROUP}"):
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


def run(messages: int, size: int, rounds: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {"closed": [], "open": []}
    request_rates: list[float] = []
    load = [round(os.getloadavg()[0], 2)]
    with tempfile.TemporaryDirectory(prefix="console-cost-") as tmp:
        server = ServerProcess(f"{tmp}/data").start()
        try:
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={"millrace.segments.initial": "2"})]
                                )[TOPIC].result(30)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per condition (alternating)")
    args = parser.parse_args()
    print(json.dumps(run(args.messages, args.size, args.rounds), indent=2))


if __name__ == "__main__":
    main()
