#!/usr/bin/env bash
# Type check the millrace package (protocol/, gateway/, streams/, store/, client/ and spark/ through the links in millrace/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
exec .venv/bin/python -m mypy "$@"
