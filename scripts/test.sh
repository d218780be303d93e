#!/usr/bin/env bash
# One command: set everything up, then run the whole test suite (lint included). This is what CI runs.
#   ./scripts/test.sh                  the full suite, the slowest tests listed at the end
#   ./scripts/test.sh --fast           the fast tier while working: in-process tests that are not slow
#   ./scripts/test.sh [--fast] ARGS    ARGS go to pytest (a file, -k, -x, another -m...)
# Tiers are pytest markers (pyproject.toml): unit, process (set automatically by tests/tiers.py), slow and
# long_faults.
# The full run uses MILLRACE_TEST_WORKERS pytest-xdist workers (default 3; 0 runs serially): the suite
# mostly waits on the processes it starts, so three workers keep two cores busy (tests/parallel.py says
# which tests stay together). The fast tier runs serially: it is short and in-process.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tier=()
# The whole run's slowest tests, so the time budget of the suite stays visible.
durations=(--durations=25)
workers="${MILLRACE_TEST_WORKERS:-3}"
if [ "${1:-}" = "--fast" ]; then
    shift
    tier=(-m "unit and not slow")
    durations=(--durations=10)
    workers=0
fi
parallel=()
[ "$workers" -gt 0 ] && parallel=(-n "$workers")
"$root/scripts/bootstrap.sh" || exit 1
cd "$root"
.venv/bin/ruff check . || exit 1
scripts/typecheck.sh || exit 1
.venv/bin/python -m pytest -q -rfEs "${parallel[@]}" "${durations[@]}" "${tier[@]}" "$@"
status=$?
# pytest exits 5 when it collected no tests; that is not a failure of the code.
[ "$status" -eq 5 ] && status=0
exit "$status"
