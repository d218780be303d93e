"""Pravega's official Python client (``pravega`` on PyPI, imported as ``pravega_client``: the binding of
Pravega's Rust client) manages scopes and streams through Millrace's Pravega controller API, unchanged;
Millrace's own client sees the same scopes, streams, segments and policies."""

from __future__ import annotations

import pravega_client
import pytest

from millrace import RetentionType, ScalingType, StreamManager
from tests.server_process import ServerProcess, create_topic


def test_scopes_are_created_listed_and_deleted(controller_uri: str, millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    assert pravega.create_scope("orders") is True
    assert pravega.create_scope("orders") is False  # SCOPE_EXISTS: Pravega's client answers False
    assert millrace_sm.check_scope_exists("orders")
    assert "orders" in pravega.list_scope()
    assert pravega.delete_scope("orders") is True
    assert not millrace_sm.check_scope_exists("orders")
    assert pravega.delete_scope("orders") is False  # SCOPE_NOT_FOUND
    assert "orders" not in pravega.list_scope()


def test_a_fixed_stream_has_its_segments(controller_uri: str, millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("fixed")
    assert pravega.create_stream("fixed", "clicks", 3) is True
    assert pravega.create_stream("fixed", "clicks", 3) is False  # STREAM_EXISTS
    described = millrace_sm.describe_stream("fixed", "clicks")
    assert described.config.scaling.type == ScalingType.FIXED_NUM_SEGMENTS
    assert described.config.initial_segments == 3
    assert [(s.segment.key_start, s.segment.key_end) for s in described.segments] == [
        (0.0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1.0)]
    assert pravega.list_stream("fixed") == ["clicks"]


def test_a_stream_scaling_by_event_rate_keeps_its_policies_and_tags(controller_uri: str,
                                                                     millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("rated")
    scaling = pravega_client.StreamScalingPolicy.auto_scaling_policy_by_event_rate(100, 3, 2)
    retention = pravega_client.StreamRetentionPolicy.by_time(60_000)
    assert pravega.create_stream_with_policy("rated", "events", scaling, retention, ["hot", "eu"]) is True
    config = millrace_sm.describe_stream("rated", "events").config
    assert (config.scaling.type, config.scaling.target_rate, config.scaling.scale_factor,
            config.scaling.min_segments) == (ScalingType.BY_RATE_IN_EVENTS_PER_SEC, 100, 3, 2)
    assert config.initial_segments == 2  # Pravega creates a stream with its minimum
    assert (config.retention.type, config.retention.value) == (RetentionType.TIME, 60_000)
    assert config.tags == ("hot", "eu")
    assert pravega.get_stream_tags("rated", "events") == ["hot", "eu"]

    by_data = pravega_client.StreamScalingPolicy.auto_scaling_policy_by_data_rate(512, 2, 1)
    pravega.create_stream_with_policy("rated", "bytes", by_data, pravega_client.StreamRetentionPolicy.by_size(1 << 20),
                                      ["eu"])
    config = millrace_sm.describe_stream("rated", "bytes").config
    assert (config.scaling.type, config.scaling.target_rate) == (ScalingType.BY_RATE_IN_KBYTES_PER_SEC, 512)
    assert (config.retention.type, config.retention.value) == (RetentionType.SIZE, 1 << 20)
    assert sorted(pravega.list_stream("rated")) == ["bytes", "events"]
    assert sorted(millrace_sm.list_streams("rated", "eu")) == ["bytes", "events"]


def test_an_update_replaces_policies_and_tags_but_not_the_segments(controller_uri: str,
                                                                   millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("updated")
    pravega.create_stream("updated", "s", 2)
    scaling = pravega_client.StreamScalingPolicy.auto_scaling_policy_by_event_rate(50, 2, 1)
    assert pravega.update_stream_with_policy("updated", "s", scaling,
                                             pravega_client.StreamRetentionPolicy.by_size(4096), ["new"]) is True
    described = millrace_sm.describe_stream("updated", "s")
    assert (described.config.scaling.type, described.config.scaling.target_rate) == (
        ScalingType.BY_RATE_IN_EVENTS_PER_SEC, 50)
    assert (described.config.retention.type, described.config.retention.value) == (RetentionType.SIZE, 4096)
    assert pravega.get_stream_tags("updated", "s") == ["new"]
    assert described.config.initial_segments == 2 and len(described.segments) == 2


def test_seal_then_delete(controller_uri: str, millrace_sm: StreamManager) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    pravega.create_scope("lifecycle")
    pravega.create_stream("lifecycle", "s", 1)
    with pytest.raises(ValueError, match="Stream Not Sealed"):  # STREAM_NOT_SEALED
        pravega.delete_stream("lifecycle", "s")
    with pytest.raises(ValueError, match="Scope not empty"):  # SCOPE_NOT_EMPTY
        pravega.delete_scope("lifecycle")
    assert pravega.seal_stream("lifecycle", "s") is True
    assert millrace_sm.describe_stream("lifecycle", "s").sealed
    assert pravega.delete_stream("lifecycle", "s") is True
    assert not millrace_sm.check_stream_exists("lifecycle", "s")
    assert pravega.delete_stream("lifecycle", "s") is False  # STREAM_NOT_FOUND
    assert pravega.list_stream("lifecycle") == []
    assert pravega.delete_scope("lifecycle") is True


def test_refusals_are_the_statuses_pravega_answers(controller_uri: str) -> None:
    pravega = pravega_client.StreamManager(controller_uri)
    with pytest.raises(ValueError, match="Invalid Stream/Scope Not Found"):  # SCOPE_NOT_FOUND
        pravega.create_stream("no-such-scope", "s", 1)
    pravega.create_scope("names")
    with pytest.raises(ValueError, match="Invalid Stream/Scope Not Found"):  # INVALID_STREAM_NAME
        pravega.create_stream("names", "not/a/name", 1)
    with pytest.raises(ValueError, match="reserved"):  # the stream layer's rule, as for the native client
        pravega.create_stream("names", "_mine", 1)
    with pytest.raises(ValueError, match="Stream/Scope Not Found"):
        pravega.seal_stream("names", "missing")
    with pytest.raises(ValueError, match="NotFound"):
        pravega.get_stream_tags("names", "missing")


def test_kafka_topics_are_streams_that_are_never_sealed(server: ServerProcess, controller_uri: str,
                                                        millrace_sm: StreamManager) -> None:
    create_topic(server, "payments", 2)
    pravega = pravega_client.StreamManager(controller_uri)
    assert "payments" in pravega.list_stream("kafka")
    with pytest.raises(ValueError, match="PermissionDenied.*never sealed"):
        pravega.seal_stream("kafka", "payments")
    assert not millrace_sm.describe_stream("kafka", "payments").sealed
    with pytest.raises(ValueError, match="CreateTopics"):
        pravega.create_stream("kafka", "not-a-topic", 1)
