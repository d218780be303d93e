#!/usr/bin/env bash
# One command: set everything up, then run the whole test suite (lint included).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh" || exit 1
cd "$root"
.venv/bin/ruff check . || exit 1
scripts/typecheck.sh || exit 1
.venv/bin/python -m pytest -q -rfEs "$@"
status=$?
# pytest exits 5 when it collected no tests; that is not a failure of the code.
[ "$status" -eq 5 ] && status=0
exit "$status"
