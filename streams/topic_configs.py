"""Every topic config a Kafka 4.0 broker knows, with its type, default, valid values and broker
synonyms (Kafka's ``LogConfig`` and ``ServerTopicConfigSynonyms``), plus Millrace's own ``millrace.*``
configs. Validation answers with Kafka's ``ConfigException`` wording ("Invalid value V for
configuration N: ...") so tools show the messages their users know.

Defaults are Kafka's except where Millrace's storage differs and says so in the config's doc:
retention is unlimited (old data tiers to long-term storage) and ``max.message.bytes`` is the
gateway's batch cap. Configs about Kafka's local log files (segment.*, flush.*, index.*,
preallocate, file.delete.delay.ms) and replication (throttled replicas, unclean leader election)
are validated and stored for tools that set them but change nothing: a partition is a slice of a
stream whose storage is the segment store's. ``compression.type`` other than ``producer`` makes the
partition storage recompress each batch of another codec (with ``compression.<codec>.level``), as
Kafka's broker does. ``cleanup.policy=compact`` is served by the log cleaner
(``partitions/cleaner.py``), with the compaction tunables.

Pure: no I/O, safe from any thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# DescribeConfigsResponse.ConfigType
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
_TYPE_NAMES = {INT: "INT", LONG: "LONG", DOUBLE: "DOUBLE"}

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class ConfigValueError(ValueError):
    """A value Kafka would refuse, with Kafka's message."""


Check = Callable[[str, str, object], None]  # (name, raw value, parsed value); raises ConfigValueError


def _invalid(name: str, raw: str, why: str) -> ConfigValueError:
    return ConfigValueError(f"Invalid value {raw} for configuration {name}: {why}")


def at_least(low: float) -> Check:
    def check(name: str, raw: str, value: object) -> None:
        if value < low:  # type: ignore[operator]
            raise _invalid(name, raw, f"Value must be at least {_number(low)}")
    return check


def between(low: float, high: float) -> Check:
    def check(name: str, raw: str, value: object) -> None:
        if value < low:  # type: ignore[operator]
            raise _invalid(name, raw, f"Value must be at least {_number(low)}")
        if value > high:  # type: ignore[operator]
            raise _invalid(name, raw, f"Value must be no more than {_number(high)}")
    return check


def one_of(*allowed: str) -> Check:
    """Kafka's ValidString (and ValidList.in for each item of a list)."""
    def check(name: str, raw: str, value: object) -> None:
        for item in value if isinstance(value, list) else [value]:
            if item not in allowed:
                raise _invalid(name, str(item), f"String must be one of: {', '.join(allowed)}")
    return check


def _gzip_level(name: str, raw: str, value: object) -> None:
    if value != -1 and not 1 <= value <= 9:  # type: ignore[operator]
        raise _invalid(name, raw, "Value must be between 1 and 9, or -1")


def _throttled_replicas(name: str, raw: str, value: object) -> None:
    """Kafka's ThrottledReplicaListValidator: "*" or partition:broker pairs."""
    items = value if isinstance(value, list) else []
    if items == ["*"]:
        return
    for item in items:
        partition, sep, broker = item.partition(":")
        if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
            raise _invalid(name, f"[{', '.join(items)}]", f"{name} must be the literal '*' or a list of replicas in "
                           "the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class TopicConfigDef:
    type: int
    default: str
    doc: str
    synonyms: tuple[str, ...] = ()  # the broker configs that supply the default, highest precedence first
    check: Check | None = None
    read_only: bool = False  # set at creation only

    def parse(self, name: str, raw: str) -> object:
        """The typed value of ``raw`` as Kafka's ConfigDef parses it (trimmed), validated."""
        text = raw.strip()
        value: object
        if self.type in (INT, LONG):
            low, high = (INT_MIN, INT_MAX) if self.type == INT else (LONG_MIN, LONG_MAX)
            try:
                value = int(text)
            except ValueError:
                raise _invalid(name, raw, f"Not a number of type {_TYPE_NAMES[self.type]}") from None
            if not low <= value <= high:
                raise _invalid(name, raw, f"Not a number of type {_TYPE_NAMES[self.type]}")
        elif self.type == DOUBLE:
            try:
                value = float(text)
            except ValueError:
                raise _invalid(name, raw, "Not a number of type DOUBLE") from None
            if math.isnan(value):
                raise _invalid(name, raw, "Not a number of type DOUBLE")
        elif self.type == BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise _invalid(name, raw, "Expected value to be either true or false")
            value = text.lower() == "true"
        elif self.type == LIST:
            value = parse_list(text)
        else:
            value = text
        if self.check is not None:
            self.check(name, raw, value)
        return value


def parse_list(text: str) -> list[str]:
    """A LIST config's items: comma-separated, trimmed; "" is the empty list."""
    return [item.strip() for item in text.split(",")] if text.strip() else []


_DAY_MS = 24 * 60 * 60 * 1000
_NOT_APPLICABLE = ("Validated and stored for tools that set it; Millrace keeps partitions as slices of "
                   "stream segments, so it changes nothing here.")

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    "cleanup.policy": TopicConfigDef(
        LIST, "delete", "\"delete\" discards old data by retention.ms / retention.bytes; \"compact\" keeps the "
        "latest record per key (the log cleaner); both may be set; an empty list keeps everything.",
        ("log.cleanup.policy",), one_of(*CLEANUP_POLICIES)),
    "compression.gzip.level": TopicConfigDef(INT, "-1", "The gzip level of batches"
                                             " recompressed for compression.type=gzip.",
                                             ("compression.gzip.level",), _gzip_level),
    "compression.lz4.level": TopicConfigDef(INT, "9", "The lz4 level of batches"
                                             " recompressed for compression.type=lz4.",
                                            ("compression.lz4.level",), between(1, 17)),
    "compression.type": TopicConfigDef(
        STRING, "producer", "The codec batches are stored with: \"producer\" keeps the producer's, another "
        "value recompresses batches of other codecs.",
        ("compression.type",), one_of(*COMPRESSION_TYPES)),
    "compression.zstd.level": TopicConfigDef(INT, "3", "The zstd level of batches"
                                             " recompressed for compression.type=zstd.",
                                             ("compression.zstd.level",), between(-131072, 22)),
    "delete.retention.ms": TopicConfigDef(LONG, str(_DAY_MS), "How long tombstones (and emptied transaction "
                                          "markers) are kept on compacted topics, by their timestamps.",
                                          ("log.cleaner.delete.retention.ms",), at_least(0)),
    "file.delete.delay.ms": TopicConfigDef(LONG, "60000", _NOT_APPLICABLE, ("log.segment.delete.delay.ms",),
                                           at_least(0)),
    "flush.messages": TopicConfigDef(LONG, str(LONG_MAX), "Appends are durable when acknowledged; " + _NOT_APPLICABLE,
                                     ("log.flush.interval.messages",), at_least(1)),
    "flush.ms": TopicConfigDef(LONG, str(LONG_MAX), "Appends are durable when acknowledged; " + _NOT_APPLICABLE,
                               ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"), at_least(0)),
    "follower.replication.throttled.replicas": TopicConfigDef(LIST, "", _NOT_APPLICABLE, (), _throttled_replicas),
    "index.interval.bytes": TopicConfigDef(INT, "4096", "Every batch is indexed; " + _NOT_APPLICABLE,
                                           ("log.index.interval.bytes",), at_least(0)),
    "leader.replication.throttled.replicas": TopicConfigDef(LIST, "", _NOT_APPLICABLE, (), _throttled_replicas),
    "local.retention.bytes": TopicConfigDef(LONG, "-2", "Tiering is the segment store's; " + _NOT_APPLICABLE,
                                            ("log.local.retention.bytes",), at_least(-2)),
    "local.retention.ms": TopicConfigDef(LONG, "-2", "Tiering is the segment store's; " + _NOT_APPLICABLE,
                                         ("log.local.retention.ms",), at_least(-2)),
    "max.compaction.lag.ms": TopicConfigDef(LONG, str(LONG_MAX), "A compacted partition holding a record older "
                                            "than this is cleaned whatever its dirty ratio.",
                                            ("log.cleaner.max.compaction.lag.ms",), at_least(1)),
    "max.message.bytes": TopicConfigDef(INT, str(8 * 1024 * 1024), "Largest record batch accepted (the gateway's "
                                        "own cap applies too).", ("message.max.bytes",), at_least(0)),
    "message.timestamp.after.max.ms": TopicConfigDef(
        LONG, str(60 * 60 * 1000), "How far past the broker's clock a CreateTime record's timestamp may be; "
        "later ones are refused with INVALID_TIMESTAMP.", ("log.message.timestamp.after.max.ms",), at_least(0)),
    "message.timestamp.before.max.ms": TopicConfigDef(
        LONG, str(LONG_MAX), "How far before the broker's clock a CreateTime record's timestamp may be; older "
        "ones are refused with INVALID_TIMESTAMP.", ("log.message.timestamp.before.max.ms",), at_least(0)),
    "message.timestamp.type": TopicConfigDef(
        STRING, "CreateTime", "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch "
        "with the broker's clock when it is appended.", ("log.message.timestamp.type",), one_of(*TIMESTAMP_TYPES)),
    "min.cleanable.dirty.ratio": TopicConfigDef(DOUBLE, "0.5", "A compacted partition is cleaned once its "
                                                "uncleaned bytes are at least this share of it.",
                                                ("log.cleaner.min.cleanable.ratio",), between(0, 1)),
    "min.compaction.lag.ms": TopicConfigDef(LONG, "0", "Records younger than this are never compacted.",
                                            ("log.cleaner.min.compaction.lag.ms",), at_least(0)),
    "min.insync.replicas": TopicConfigDef(
        INT, "1", "Each partition has one replica (its durability is the segment store's log): with more "
        "than 1, acks=all produce is refused with NOT_ENOUGH_REPLICAS, as a one-broker Kafka does.",
        ("min.insync.replicas",), at_least(1)),
    "preallocate": TopicConfigDef(BOOLEAN, "false", _NOT_APPLICABLE, ("log.preallocate",)),
    "remote.log.copy.disable": TopicConfigDef(BOOLEAN, "false", "Tiering is the segment store's; " + _NOT_APPLICABLE),
    "remote.log.delete.on.disable": TopicConfigDef(BOOLEAN, "false",
                                                   "Tiering is the segment store's; " + _NOT_APPLICABLE),
    "remote.storage.enable": TopicConfigDef(BOOLEAN, "false", "Millrace always tiers to long-term storage; "
                                            + _NOT_APPLICABLE),
    "retention.bytes": TopicConfigDef(LONG, "-1", "Size a partition may grow to before old data is deleted; -1 for "
                                      "no limit.", ("log.retention.bytes",)),
    "retention.ms": TopicConfigDef(LONG, "-1", "How long a partition keeps data before deleting it, in ms; -1 "
                                   "keeps it forever (old data tiers to long-term storage).",
                                   ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
                                   at_least(-1)),
    "segment.bytes": TopicConfigDef(INT, str(1024 * 1024 * 1024), _NOT_APPLICABLE, ("log.segment.bytes",),
                                    at_least(1024 * 1024)),
    "segment.index.bytes": TopicConfigDef(INT, str(10 * 1024 * 1024), _NOT_APPLICABLE,
                                          ("log.index.size.max.bytes",), at_least(4)),
    "segment.jitter.ms": TopicConfigDef(LONG, "0", _NOT_APPLICABLE, ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                                        at_least(0)),
    "segment.ms": TopicConfigDef(LONG, str(7 * _DAY_MS), _NOT_APPLICABLE, ("log.roll.ms", "log.roll.hours"),
                                 at_least(1)),
    "unclean.leader.election.enable": TopicConfigDef(BOOLEAN, "false", "One replica per partition; "
                                                     + _NOT_APPLICABLE, ("unclean.leader.election.enable",)),
    # Millrace's own.
    "millrace.segments.initial": TopicConfigDef(
        INT, "0", "How many stream segments carry the topic at creation; 0 means one per partition (or, with "
        "automatic scaling, as few as min.segments allows). Set at creation only.", (), at_least(0), True),
    "millrace.scaling.type": TopicConfigDef(STRING, "fixed", "Automatic scaling of the topic's stream: fixed, "
                                            "by_event_rate or by_data_rate.", (),
                                            one_of("fixed", "by_event_rate", "by_data_rate")),
    "millrace.scaling.target": TopicConfigDef(INT, "0", "Scaling target per segment: events/s (by_event_rate) or "
                                              "KiB/s (by_data_rate).", (), at_least(0)),
    "millrace.scaling.factor": TopicConfigDef(INT, "2", "How many segments a hot segment splits into.", (),
                                              at_least(0)),
    "millrace.scaling.min.segments": TopicConfigDef(INT, "1", "Scaling down never goes below this many segments.",
                                                    (), at_least(1)),
    "millrace.scaling.grow.partitions": TopicConfigDef(BOOLEAN, "false", "Add partitions when a single-partition "
                                                       "segment stays too hot (Kafka clients see them on metadata "
                                                       "refresh)."),
}

DEFAULTS: dict[str, str] = {name: d.default for name, d in TOPIC_CONFIGS.items()}
LIST_CONFIGS = frozenset(name for name, d in TOPIC_CONFIGS.items() if d.type == LIST)
READ_ONLY = frozenset(name for name, d in TOPIC_CONFIGS.items() if d.read_only)


def unknown_config_message(name: str) -> str:
    return f"Unknown topic config name: {name}"


def validate(name: str, raw: str) -> object:
    """The parsed value of topic config ``name``, or ConfigValueError with Kafka's message; Millrace's
    own refusals would come after Kafka's checks pass."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigValueError(unknown_config_message(name))
    return definition.parse(name, raw)


def validate_together(configs: dict[str, str]) -> None:
    """Kafka's cross-config rule (LogConfig.validateValues) over a topic's effective configs."""
    low = int(configs.get("min.compaction.lag.ms", DEFAULTS["min.compaction.lag.ms"]))
    high = int(configs.get("max.compaction.lag.ms", DEFAULTS["max.compaction.lag.ms"]))
    if low > high:
        raise ConfigValueError(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                               f"max.compaction.lag.ms ({high})")
