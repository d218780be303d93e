"""``python -m benchmarks SCENARIO [options]``: Millrace's measurements, one named scenario each.

Every scenario starts its own servers on 127.0.0.1 and measures the machine's floors in the same run,
since figures from a shared two-core machine mean something only beside them. ``--json FILE`` keeps a
run's figures; ``python -m benchmarks SCENARIO --help`` says what a scenario does and takes. Never a
test: benchmarks need a quiet machine, and their figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import clients, cluster, costs, floor, hostile, produce, revisions, scale, soaks
from benchmarks.harness import Scenario

SCENARIOS: list[Scenario] = [*produce.SCENARIOS, *floor.SCENARIOS, *soaks.SCENARIOS, *scale.SCENARIOS,
                             *clients.SCENARIOS, *costs.SCENARIOS, *hostile.SCENARIOS, *cluster.SCENARIOS,
                             *revisions.SCENARIOS]


def parser() -> argparse.ArgumentParser:
    width = max(len(s.name) for s in SCENARIOS)
    listing = "\n".join(f"  {s.name:<{width}}  {s.summary}" for s in SCENARIOS)
    top = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                  epilog=f"scenarios:\n{listing}",
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    # The listing is the epilog, one line each: argparse's own list of sub-commands wraps and repeats.
    chosen = top.add_subparsers(dest="scenario", metavar="SCENARIO", required=True)
    for scenario in SCENARIOS:
        sub = chosen.add_parser(scenario.name, description=scenario.description or scenario.summary,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        scenario.add_arguments(sub)
        sub.add_argument("--json", metavar="FILE", help="also write the run's figures here as JSON")
        sub.set_defaults(scenario_run=scenario.run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    figures = args.scenario_run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
