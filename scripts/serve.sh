#!/usr/bin/env bash
# One command: set everything up, then start the embedded single-node Millrace server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
exec "$root/.venv/bin/millrace" serve "$@"
