"""The Kafka and native benchmarks on two revisions of Millrace, in one run, side by side.

A change that should not alter speed (a refactoring, a new seam) is judged against the revision before
it on the same machine at the same time: the base revision is exported into a scratch directory, then
each round runs ``benchmarks.kafka_bench`` and ``benchmarks.native_client_bench`` once on the base and
once on the working tree, in ABBA order (base first in odd rounds, head first in even ones), because the
second run of a round meets the first one's writeback and is measurably slower even when both trees
are the same, and drift in the machine's speed falls on both. Each run starts its own server from its own tree (``PYTHONPATH`` names the tree, so
``millrace`` resolves there). Prints, per case, the medians over the rounds and the ratio head/base:
produce and consume msgs/s and server CPU seconds per million messages (Kafka, librdkafka producers,
acks=all, idempotent), native writer events/s beside confluent-kafka on the same server, and the
disk's raw sequential write and fsync rates measured in each Kafka run. The ratio is the median of the
rounds' own head/base ratios, as pairs taken side by side.

    .venv/bin/python -m benchmarks.compare_revisions BASE [--rounds 3] [--messages 100000] [--events 10000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def export_revision(revision: str, into: Path) -> Path:
    """``revision``'s tree (links kept) in ``into``; the benchmarks and the server run from there."""
    archive = subprocess.run(["git", "archive", "--format=tar", revision], cwd=REPO, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="tar")
    return into


def json_lines(output: str) -> list[dict[str, Any]]:
    """The JSON documents a benchmark printed: one per line, or one indented document."""
    stripped = output.strip()
    if stripped.startswith("{") and "\n{" not in stripped:
        return [json.loads(stripped)]
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def run_benchmark(tree: Path, module: str, *args: str) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=tree, env=env, check=True,
                          capture_output=True, text=True)
    return json_lines(done.stdout)


def kafka_figures(result: dict[str, Any]) -> dict[str, float]:
    figures = {"disk MB/s": result["disk"]["sequential_write_mb_per_s"], "disk fsync/s": result["disk"]["fsyncs_per_s"]}
    for case in result["cases"]:
        name = f"kafka {case['size']} B x{case['partitions']}p"
        figures[f"{name} produce msg/s"] = case["produce_msgs_per_s"]
        figures[f"{name} consume msg/s"] = case["consume_msgs_per_s"]
        figures[f"{name} server cpu s/M"] = case["server_cpu_s_per_million"]
    return figures


def native_figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    figures = {}
    for row in rows:
        if "native" not in row:
            continue
        name = f"native {row['size']} B {row['writers']}w {'keyed' if row['keyed'] else 'unkeyed'}"
        figures[f"{name} events/s"] = row["native"]["events_per_s"]
        figures[f"{name} (kafka beside) events/s"] = row["kafka"]["events_per_s"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the revision to compare the working tree against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000, help="Kafka messages per case")
    parser.add_argument("--events", type=int, default=10_000, help="native events per case")
    parser.add_argument("--only", choices=("kafka", "native"), help="run one of the two benchmarks")
    args = parser.parse_args()
    samples: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    with tempfile.TemporaryDirectory(prefix="millrace-base-") as scratch:
        trees = {"base": export_revision(args.base, Path(scratch)), "head": REPO}
        for round_number in range(args.rounds):
            order = list(trees.items()) if round_number % 2 == 0 else list(reversed(trees.items()))
            for label, tree in order:
                figures: dict[str, float] = {}
                if args.only != "native":
                    figures.update(kafka_figures(run_benchmark(
                        tree, "benchmarks.kafka_bench", "--json", "--runs", "1", "--messages", str(args.messages),
                        "--kcat-messages", "0")[0]))
                if args.only != "kafka":
                    figures.update(native_figures(run_benchmark(
                        tree, "benchmarks.native_client_bench", "--runs", "1", "--events", str(args.events),
                        "--cases", "plain")))
                for name, value in figures.items():
                    samples[label].setdefault(name, []).append(float(value))
                print(f"round {round_number + 1}/{args.rounds}: {label} done", file=sys.stderr, flush=True)
    print(f"{'figure':<48} {'base':>12} {'head':>12} {'head/base':>9} {'min':>6} {'max':>6}")
    for name, base_values in samples["base"].items():
        head_values = samples["head"][name]
        ratios = [h / b for b, h in zip(base_values, head_values, strict=True) if b]
        print(f"{name:<48} {statistics.median(base_values):>12.1f} {statistics.median(head_values):>12.1f} "
              f"{statistics.median(ratios):>9.3f} {min(ratios):>6.2f} {max(ratios):>6.2f}")
    print(f"medians of {args.rounds} rounds in ABBA order (ratio: the median of the rounds' ratios, with their "
          f"min and max); base {args.base}, head the working tree; {args.messages} Kafka messages and "
          f"{args.events} native events per case")


if __name__ == "__main__":
    main()
