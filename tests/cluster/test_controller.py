"""The controller runs on one node at a time: the elected node (``cluster status``: ``controller``).

Kafka: Metadata and DescribeCluster name it as the controller, topic admin requests on any other node
answer NOT_CONTROLLER, and the clients (kafka-python, confluent-kafka) bootstrapped on another node
send them there. Native: scope, stream and table changes sent to any node are forwarded to it, and a
node given a forwarded change it does not run refuses it (retriably) instead of running it. When the
controller's node is SIGKILLed, another is elected and both kinds of change work through the others."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as ConfluentTopic
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

from millrace import StreamManager
from millrace.gateway.commands.local_cluster import zookeeper_missing
from millrace.gateway.kafka.handlers.configs import FORWARDED_CLIENT_ID
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.create_topics import CreateTopicsRequest
from millrace.gateway.kafka_protocol.messages.describe_configs import DescribeConfigsRequest
from millrace.gateway.kafka_protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from millrace.gateway.kafka_protocol.messages.metadata import MetadataRequest
from millrace.protocol.errors import RetriableError, StreamExistsError
from millrace.protocol.messages import CreatedReply, CreateScope
from tests.cluster.local_cluster import LocalClusterCli
from tests.cluster.test_local_cluster import CONTAINERS, all_owned, wait_status
from tests.kafka.wire import KafkaWire

pytestmark = [pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing())),
              pytest.mark.timeout(300)]

CREATE_TOPICS, METADATA, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 19, 3, 32, 44
TOPIC_RESOURCE, BROKER_RESOURCE, SET = 2, 4, 0


def node_addresses(cluster: LocalClusterCli) -> dict[str, tuple[str, str]]:
    """Node id -> (Kafka address, native endpoint), in node order as ``cluster up`` lists them."""
    kafka = cluster.bootstrap.split(",")
    return {str(i + 1): (kafka[i], native) for i, native in enumerate(cluster.summary["native"])}


def controller_of(status: dict[str, Any]) -> str:
    assert status["controller"] is not None, "no node is elected"
    return str(status["controller"])


def confluent_create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([ConfluentTopic(topic, 2, 1)])[topic].result(timeout=60)


def alter(*resources: tuple[int, str, dict[str, str]], validate_only: bool = False) -> IncrementalAlterConfigsRequest:
    """An IncrementalAlterConfigs SETting each resource's configs."""
    r = IncrementalAlterConfigsRequest
    return r(resources=[r.AlterConfigsResource(resource_type=kind, resource_name=name, configs=[
        r.AlterableConfig(name=k, config_operation=SET, value=v) for k, v in configs.items()])
        for kind, name, configs in resources], validate_only=validate_only)


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    wire = KafkaWire.connect(bootstrap)
    try:
        described = wire.send(DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic,
                                                           configuration_keys=[name])]))
    finally:
        wire.close()
    assert described.results[0].error_code == ErrorCode.NONE
    return str(described.results[0].configs[0].value)


def test_topic_and_stream_changes_run_on_the_elected_controller(tmp_path: Path) -> None:
    with LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--log-replicas", "3", "--containers",
                         str(CONTAINERS), "--session-timeout", "3") as cluster:
        status = wait_status(cluster, all_owned, "every container owned")
        controller = controller_of(status)
        addresses = node_addresses(cluster)
        other = next(node for node in addresses if node != controller)
        other_kafka, other_native = addresses[other]
        print(f"controller: node {controller}; clients bootstrapped on node {other} only")

        # Kafka: the other node names the controller and refuses topic changes itself.
        wire = KafkaWire.connect(other_kafka)
        try:
            metadata = wire.request(METADATA, 9, topics=[], allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False)
            assert metadata.controller_id == int(controller)
            created = wire.send(CREATE_TOPICS, 4, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name="refused", num_partitions=1, replication_factor=1)], timeout_ms=10_000))
            assert created.topics[0].error_code == ErrorCode.NOT_CONTROLLER
        finally:
            wire.close()
        # ... and the clients send them to the controller.
        admin = KafkaAdminClient(bootstrap_servers=other_kafka)
        try:
            admin.create_topics([NewTopic("ctl-python", 3, 1)])
            admin.create_partitions({"ctl-python": NewPartitions(5)})
            # The bootstrapped node reads topic changes the controller made within a second, as a Kafka
            # broker learns them from its controller a moment later.
            deadline = time.monotonic() + 10
            while len(admin.describe_topics(["ctl-python"])[0]["partitions"]) != 5:
                assert time.monotonic() < deadline, "the new partitions never showed in Metadata"
                time.sleep(0.2)
            admin.delete_topics(["ctl-python"])
        finally:
            admin.close()
        confluent_create(other_kafka, "ctl-confluent")

        # A topic made on the controller is known to the other node's Metadata at once (not only after
        # its next read of the topics table, within a second): a name it does not know makes it read the
        # table first, so a consumer is not told UNKNOWN_TOPIC_OR_PARTITION (kcat -e gives up on it).
        on_controller, on_other = KafkaWire.connect(addresses[controller][0]), KafkaWire.connect(other_kafka)
        try:
            made = on_controller.send(CREATE_TOPICS, 4, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name="known-at-once", num_partitions=2, replication_factor=1)], timeout_ms=10_000))
            assert made.topics[0].error_code == ErrorCode.NONE
            seen = on_other.request(METADATA, 9, topics=[MetadataRequest.MetadataRequestTopic(name="known-at-once")],
                                    allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            assert [(t.name, t.error_code, len(t.partitions)) for t in seen.topics] == [
                ("known-at-once", ErrorCode.NONE, 2)]
            unknown = on_other.request(METADATA, 9, topics=[MetadataRequest.MetadataRequestTopic(name="made-nowhere")],
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            assert [(t.name, t.error_code) for t in unknown.topics] == [
                ("made-nowhere", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        finally:
            on_controller.close()
            on_other.close()

        # Topic configs: the other node forwards their changes to the controller (Kafka's KIP-590
        # forwarding) and answers with its results; broker resources are its own. Raw requests, since
        # the clients pick which broker gets an alter themselves.
        wire = KafkaWire.connect(other_kafka)
        try:
            altered = wire.send(INCREMENTAL_ALTER_CONFIGS, 1, alter(
                (TOPIC_RESOURCE, "ctl-confluent", {"retention.ms": "7654321"}), (BROKER_RESOURCE, other, {})))
            assert [r.error_code for r in altered.responses] == [ErrorCode.NONE, ErrorCode.NONE]
            assert topic_config(addresses[controller][0], "ctl-confluent", "retention.ms") == "7654321"
            assert topic_config(other_kafka, "ctl-confluent", "retention.ms") == "7654321"  # read back at once
            # It runs there: while the controller is paused, the other node does not answer even an alter
            # it would refuse by itself at once (an unknown config, validate_only: forwarded as well)...
            cluster.kill(f"node-{controller}", signal.SIGSTOP)
            try:
                wire.submit(INCREMENTAL_ALTER_CONFIGS, 1, alter(
                    (TOPIC_RESOURCE, "ctl-confluent", {"no.such.config": "1"}), validate_only=True))
                with pytest.raises(TimeoutError):
                    wire.receive(timeout=1.0)
            finally:
                cluster.kill(f"node-{controller}", signal.SIGCONT)
            # ... and answers with the controller's refusal once it runs again.
            assert wire.receive(timeout=30).responses[0].error_code == ErrorCode.INVALID_CONFIG
        finally:
            wire.close()
        # A forward is never forwarded again: a node that is not the controller refuses one.
        sneaky = KafkaWire.connect(other_kafka, client_id=f"{FORWARDED_CLIENT_ID}{controller}")
        try:
            refused = sneaky.send(INCREMENTAL_ALTER_CONFIGS, 1, alter(
                (TOPIC_RESOURCE, "ctl-confluent", {"retention.ms": "1"})))
            assert refused.responses[0].error_code == ErrorCode.NOT_CONTROLLER
        finally:
            sneaky.close()
        # Auto-creation through the other node: it has the controller create the topic.
        producer = Producer({"bootstrap.servers": other_kafka})
        producer.produce("ctl-auto", b"first")
        assert producer.flush(60) == 0
        on_controller = AdminClient({"bootstrap.servers": addresses[controller][0]})
        deadline = time.monotonic() + 10
        while on_controller.list_topics("ctl-auto", timeout=30).topics["ctl-auto"].error is not None:
            assert time.monotonic() < deadline, "the auto-created topic never showed on the controller"
            time.sleep(0.2)

        # Native: a change sent to the other node is forwarded; one marked forwarded is not run there.
        with StreamManager(other_native, timeout=30.0) as sm:
            assert sm.create_scope("ctl")
            sm.create_stream("ctl", "s", initial_segments=2)
            assert "s" in sm.list_streams("ctl")
            with pytest.raises(RetriableError):
                sm.controller.call(CreateScope(scope="sneaky", forwarded=True))
            assert "sneaky" not in sm.list_scopes()
        with StreamManager(addresses[controller][1], timeout=30.0) as sm:
            assert sm.controller.ask(CreateScope(scope="direct", forwarded=True), CreatedReply).created

        # The controller's node dies: another is elected; changes through a survivor work again.
        cluster.kill(f"node-{controller}", signal.SIGKILL)
        survivor = next(node for node in addresses if node != controller)
        began = time.monotonic()
        with StreamManager(addresses[survivor][1], timeout=60.0) as sm:
            # The survivor waits the election out; a forward that reached the dead node answers retriably
            # (its outcome unknown), and a user resends, as after a lost connection. More than one can: a
            # node in the middle of dying still completes connections on its listening socket, then resets
            # them, so a resend can meet the same end before the survivor's connects are refused.
            deadline = time.monotonic() + 60
            while True:
                try:
                    sm.create_stream("ctl", "after", initial_segments=1)
                    break
                except StreamExistsError:  # an earlier attempt did run after all
                    break
                except RetriableError:
                    assert time.monotonic() < deadline, "changes through the survivor never worked again"
                    time.sleep(0.2)
            assert "after" in sm.list_streams("ctl")
        native_took = time.monotonic() - began
        status = wait_status(cluster, lambda s: s["controller"] not in (None, controller), "a new controller")
        confluent_create(addresses[survivor][0], "ctl-after")
        print(f"new controller: node {controller_of(status)}; a native create through node {survivor} took "
              f"{native_took:.1f} s across the election")
