#!/usr/bin/env bash
# Sets up everything Millrace needs on a fresh machine: Debian packages, a virtualenv, the project
# and its test dependencies. Idempotent: a second run only checks.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

need_apt=()
# javac too: the Java Kafka client compatibility tests compile their small programs at test time.
(command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1) || need_apt+=(openjdk-17-jdk-headless)
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
# curl and jq: docs/security.md's HTTP examples, which tests/test_security_docs.py runs as written.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
# ZooKeeper (Debian's package: jars in /usr/share/java, zkServer.sh in /usr/share/zookeeper/bin): the cluster
# coordination tests (tests/cluster/) start a real standalone server from it; nothing runs as a service.
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
# Chromium: the web console's browser tests (tests/console/) drive Debian's headless browser through
# Playwright; Playwright's own browser download is never used.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ "${#need_apt[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    elif command -v sudo >/dev/null 2>&1; then
        sudo apt-get update -qq >/dev/null && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "bootstrap: please install ${need_apt[*]} (apt)" >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.millrace-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    # PySpark (the "spark" extra) is a one-time ~450 MB download, about a minute: the Spark example tests
    # need it. MILLRACE_NO_SPARK=1 leaves it out (those tests then skip and say why).
    extras="test,spark"
    [ "${MILLRACE_NO_SPARK:-}" = 1 ] && extras="test"
    .venv/bin/python -m pip install -q -e ".[$extras]"
    touch "$stamp"
fi

# Java Kafka client jars (3.9 and 4.x) for compat_tests/test_java_clients.py, cached under .cache/.
# A failed download is not fatal: those tests then skip and say why.
compat_tests/java/fetch_jars.sh || echo "bootstrap: Kafka client jars unavailable; Java compatibility tests will skip" >&2
