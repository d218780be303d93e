"""One scenario on two revisions of Millrace in one run, side by side (``revisions``).

A change that should not alter speed (a refactoring, a new seam), or one that should, is judged
against the revision before it on the same machine at the same time. The base revision is exported
into a scratch directory and this working tree's ``benchmarks/`` is copied over its own, so both sides
run the same measurement and only the server differs. Each round runs the scenario once on the base
and once on the working tree in ABBA order (base first in odd rounds, head first in even ones): the
second run of a round meets the first one's writeback and is measurably slower even when both trees
are the same, and drift in the machine's speed falls on both. Each run's ``PYTHONPATH`` names its tree,
so ``millrace`` (and the server it starts) resolves there.

Prints every number the scenario reports (its ``--json`` figures, floors included) as the median over
the rounds for each side and the median of the rounds' own head/base ratios, with their min and max.

    python -m benchmarks revisions BASE [--rounds 3] -- SCENARIO [SCENARIO'S OPTIONS]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import Scenario

REPO = Path(__file__).resolve().parents[1]


def export_revision(revision: str, into: Path) -> Path:
    """``revision``'s tree (links kept) in ``into``, with this tree's benchmarks in place of its own."""
    archive = subprocess.run(["git", "archive", "--format=tar", revision], cwd=REPO, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="tar")
    shutil.rmtree(into / "benchmarks", ignore_errors=True)
    shutil.copytree(REPO / "benchmarks", into / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def numbers(figures: Any, prefix: str = "") -> dict[str, float]:
    """Every number in a scenario's JSON figures, named by its path (``medians.single.local``)."""
    if isinstance(figures, bool):
        return {}
    if isinstance(figures, (int, float)):
        return {prefix: float(figures)}
    found: dict[str, float] = {}
    if isinstance(figures, dict):
        for key, value in figures.items():
            found |= numbers(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(figures, list):
        for index, value in enumerate(figures):
            found |= numbers(value, f"{prefix}[{index}]")
    return found


def run_scenario(tree: Path, scenario: list[str], scratch: Path) -> dict[str, float]:
    out = scratch / "figures.json"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-m", "benchmarks", *scenario, "--json", str(out)], cwd=tree, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return numbers(json.loads(out.read_text()))


def add_revisions_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", help="the revision to compare the working tree against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("scenario", nargs=argparse.REMAINDER, help="-- then the scenario and its options")


def run_revisions(args: argparse.Namespace) -> dict[str, Any]:
    # argparse hands everything after BASE to the remainder, ``--rounds`` too when it comes before ``--``.
    scenario = list(args.scenario)
    if "--" in scenario:
        own, scenario = scenario[:scenario.index("--")], scenario[scenario.index("--") + 1:]
        own_parser = argparse.ArgumentParser(prog="python -m benchmarks revisions BASE")
        own_parser.add_argument("--rounds", type=int, default=args.rounds)
        args.rounds = own_parser.parse_args(own).rounds
    if not scenario or scenario[0] == "revisions":
        raise SystemExit("revisions: name the scenario to run after --")
    samples: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    with tempfile.TemporaryDirectory(prefix="millrace-base-") as tmp:
        scratch = Path(tmp)
        trees = {"base": export_revision(args.base, scratch / "tree"), "head": REPO}
        for round_number in range(args.rounds):
            order = list(trees.items()) if round_number % 2 == 0 else list(reversed(trees.items()))
            for label, tree in order:
                for name, value in run_scenario(tree, scenario, scratch).items():
                    samples[label].setdefault(name, []).append(value)
                print(f"round {round_number + 1}/{args.rounds}: {label} done", flush=True)
    print(f"{'figure':<60} {'base':>12} {'head':>12} {'head/base':>9} {'min':>6} {'max':>6}")
    table: dict[str, dict[str, float]] = {}
    for name, base_values in samples["base"].items():
        head_values = samples["head"].get(name, [])
        ratios = [h / b for b, h in zip(base_values, head_values, strict=False) if b]
        if not ratios:
            continue
        table[name] = {"base": statistics.median(base_values), "head": statistics.median(head_values),
                       "head_over_base": statistics.median(ratios)}
        print(f"{name:<60} {table[name]['base']:>12.4g} {table[name]['head']:>12.4g} "
              f"{table[name]['head_over_base']:>9.3f} {min(ratios):>6.2f} {max(ratios):>6.2f}")
    print(f"medians of {args.rounds} rounds in ABBA order; base {args.base}, head the working tree; "
          f"scenario: {' '.join(scenario)}")
    return {"base": args.base, "scenario": scenario, "figures": table}


SCENARIOS = [Scenario("revisions", "any other scenario on a base revision and the working tree, alternating, "
                      "with head/base ratios", add_revisions_arguments, run_revisions, __doc__ or "")]
