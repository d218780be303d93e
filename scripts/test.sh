#!/usr/bin/env bash
# One command: set everything up, then run the whole test suite (lint included). This is what CI runs.
#   ./scripts/test.sh                  the full suite, the slowest tests listed at the end
#   ./scripts/test.sh --fast           the fast tier while working: in-process tests that are not slow
#   ./scripts/test.sh [--fast] ARGS    ARGS go to pytest (a file, -k, -x, another -m...)
# Tiers are pytest markers (pyproject.toml): unit, process (set automatically by tests/tiers.py), slow and
# long_faults.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tier=()
# The whole run's slowest tests, so the time budget of the suite stays visible.
durations=(--durations=25)
if [ "${1:-}" = "--fast" ]; then
    shift
    tier=(-m "unit and not slow")
    durations=(--durations=10)
fi
"$root/scripts/bootstrap.sh" || exit 1
cd "$root"
.venv/bin/ruff check . || exit 1
scripts/typecheck.sh || exit 1
.venv/bin/python -m pytest -q -rfEs "${durations[@]}" "${tier[@]}" "$@"
status=$?
# pytest exits 5 when it collected no tests; that is not a failure of the code.
[ "$status" -eq 5 ] && status=0
exit "$status"
