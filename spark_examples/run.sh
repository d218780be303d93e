#!/usr/bin/env bash
# One command for each Spark example (docs/spark.md):
#   spark_examples/run.sh generate [options]   # sensor readings into a topic
#   spark_examples/run.sh stream   [options]   # the streaming pipeline (Kafka source -> topic + Parquet)
#   spark_examples/run.sh history  [options]   # the same logic as a batch query over the topic's history
# Add --help after the name for every option. Sets up the virtualenv first if needed, and installs the
# project's "spark" extra (PySpark 4.0.x, confluent-kafka) when it is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$root/.venv/bin/python"
case "${1:-}" in
    generate) module=spark_examples.generate ;;
    stream) module=spark_examples.streaming_pipeline ;;
    history) module=spark_examples.historical_pipeline ;;
    *) echo "usage: $0 generate|stream|history [options]  (--help for options)" >&2; exit 2 ;;
esac
shift
[ -x "$py" ] || "$root/scripts/bootstrap.sh"
if ! "$py" - <<'PY' 2>/dev/null
import confluent_kafka, pyarrow, pyspark
assert pyspark.__version__.startswith("4.0."), pyspark.__version__
PY
then
    echo "run.sh: installing PySpark 4.0.x (about 450 MB, a minute or so)..." >&2
    "$py" -m pip install -q -e "$root[spark]"
fi
command -v java >/dev/null 2>&1 || { echo "run.sh: Spark needs Java 17 (scripts/bootstrap.sh installs it)" >&2; exit 1; }
# Paths in the options stay relative to where the command is run.
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m "$module" "$@"
