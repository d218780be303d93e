"""The Java clients 4.x, unmodified, through Millrace's Kafka 4.0 topic configs (createTopics,
describeConfigs with synonyms, incrementalAlterConfigs SET/DELETE/APPEND/SUBTRACT and Kafka's refusals,
a LogAppendTime topic), DeleteRecords followed at once by listOffsets and a consumer, and a consumer whose
fetch limits are below one batch over several partitions.

compat_tests/java/TopicConfigsClient.java is compiled against the 4.x jars (compat_tests/java_support.py)
and run once with every scenario; its JSON lines are checked here."""

from __future__ import annotations

import uuid

import pytest

from compat_tests.java_support import JavaRun, run_main
from tests.server_process import ServerProcess

RUN_TIMEOUT = 180.0
SCENARIOS = ["configs", "log_append_time", "delete_records", "small_fetches"]

pytestmark = pytest.mark.timeout(int(RUN_TIMEOUT) + 60)


@pytest.fixture(scope="module")
def java(server: ServerProcess) -> JavaRun:
    return run_main("4.x", "TopicConfigsClient", [server.bootstrap, f"jtc-{uuid.uuid4().hex[:8]}", *SCENARIOS],
                    RUN_TIMEOUT)


def test_describe_and_incremental_alter(java: JavaRun) -> None:
    (created,) = java.of("configs", "created")
    c = created["configs"]
    assert c["segment.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG", "type": "LONG", "synonyms": [
        ["segment.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"], ["log.roll.ms", "604800000", "DEFAULT_CONFIG"]]}
    assert (c["min.cleanable.dirty.ratio"]["value"], c["min.cleanable.dirty.ratio"]["type"]) == ("0.3", "DOUBLE")
    assert (c["preallocate"]["value"], c["preallocate"]["type"]) == ("true", "BOOLEAN")
    assert (c["message.timestamp.after.max.ms"]["value"], c["message.timestamp.after.max.ms"]["source"]) == (
        "3600000", "DEFAULT_CONFIG")
    assert c["leader.replication.throttled.replicas"]["type"] == "LIST"
    (altered,) = java.of("configs", "altered")
    a = altered["configs"]
    assert (a["segment.ms"]["value"], a["segment.ms"]["source"]) == ("604800000", "DEFAULT_CONFIG")
    assert (a["flush.messages"]["value"], a["flush.messages"]["source"]) == ("5000", "DYNAMIC_TOPIC_CONFIG")
    assert a["leader.replication.throttled.replicas"]["value"] == "1:0"


def test_refusals_carry_kafkas_exceptions_and_messages(java: JavaRun) -> None:
    (bad,) = java.of("configs", "bad_value")
    assert bad["outcome"] == "InvalidConfigurationException"
    assert bad["message"] == "Invalid value -5 for configuration flush.ms: Value must be at least 0"
    (scalar,) = java.of("configs", "append_scalar")
    assert (scalar["outcome"], scalar["message"]) == (
        "InvalidConfigurationException", "Can't APPEND to key segment.ms because its type is not LIST.")
    (unknown,) = java.of("configs", "unknown")
    assert (unknown["outcome"], unknown["message"]) == (
        "InvalidConfigurationException", "Unknown topic config name: no.such.config")
    (compact,) = java.of("configs", "compact")
    assert compact["outcome"] == "ok"  # compacted topics exist now (the log cleaner)


def test_log_append_time_reaches_the_java_consumer(java: JavaRun) -> None:
    (sent,) = java.of("log_append_time", "sent")
    (read,) = java.of("log_append_time", "read")
    assert sent["timestamp"] >= sent["before"]  # the broker's append time, not the record's 1000
    assert (read["timestampType"], read["timestamp"]) == ("LogAppendTime", sent["timestamp"])


def test_delete_records_then_list_offsets_and_consume(java: JavaRun) -> None:
    (deleted,) = java.of("delete_records", "deleted")
    assert (deleted["lowWatermark"], deleted["earliest"], deleted["firstRead"]) == (6, 6, 6)


def test_java_consumer_with_fetch_limits_below_one_batch(java: JavaRun) -> None:
    (read,) = java.of("small_fetches", "read")
    assert read["counts"] == {"0": 10, "1": 10, "2": 10}
