"""Options for Spark's Kafka source, built from the pipelines' command-line arguments (no Spark needed)."""

from __future__ import annotations

import json


def offsets_json(topic: str, offsets: dict[int, int]) -> str:
    """``{"topic": {"0": 23, "1": -2}}`` for startingOffsets/endingOffsets (-2 earliest, -1 latest)."""
    return json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})


def source_options(bootstrap: str, topic: str, *, starting_offsets: str | None = None,
                   ending_offsets: str | None = None, starting_timestamp: int | None = None,
                   ending_timestamp: int | None = None, fail_on_data_loss: bool = True,
                   max_offsets_per_trigger: int | None = None, extra: dict[str, str] | None = None,
                   ) -> dict[str, str]:
    """The ``spark.read[Stream].format("kafka")`` options. Timestamps (epoch ms) take precedence over offsets
    in Spark: a partition starts at its first record with timestamp >= starting_timestamp and ends before its
    first record with timestamp >= ending_timestamp (or at latest when there is none). A partition with no
    record at or after starting_timestamp starts at latest (it contributes nothing) rather than failing the
    query, which is Spark's default ("error") when Kafka answers "no such offset"."""
    opts: dict[str, str] = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                            "failOnDataLoss": str(fail_on_data_loss).lower()}
    if starting_offsets is not None:
        opts["startingOffsets"] = starting_offsets
    if ending_offsets is not None:
        opts["endingOffsets"] = ending_offsets
    if starting_timestamp is not None:
        opts["startingTimestamp"] = str(starting_timestamp)
        opts["startingOffsetsByTimestampStrategy"] = "latest"
    if ending_timestamp is not None:
        opts["endingTimestamp"] = str(ending_timestamp)
    if max_offsets_per_trigger is not None:
        opts["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    opts.update(extra or {})  # any other source option, e.g. kafka.security.protocol
    return opts


def sink_options(bootstrap: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The Kafka sink's client options: the bootstrap servers and the ``kafka.*`` settings given for the
    source (security.protocol, sasl.*, ssl.*), so a secured listener is written as it is read."""
    client = {key: value for key, value in (extra or {}).items() if key.startswith("kafka.")}
    return {**client, "kafka.bootstrap.servers": bootstrap}
