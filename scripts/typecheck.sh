#!/usr/bin/env bash
# Type check protocol/, gateway/, store/ and client/ with mypy under their installed names (millrace.gateway, ...).
# The editable install maps millrace.<place> -> <place>/ through an import hook mypy cannot follow, so
# mypy reads a tree of links that spells the namespace out: .typecheck/millrace/{protocol,gateway,store,client}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tree=.typecheck/millrace
mkdir -p "$tree"
ln -sfn ../../millrace/__init__.py "$tree/__init__.py"
ln -sfn ../../millrace/__main__.py "$tree/__main__.py"
for place in protocol gateway store client; do
    ln -sfn "../../$place" "$tree/$place"
done
exec .venv/bin/python -m mypy "$@"
