"""Golden bytes: our codec against kafka-python's own (independently generated) protocol classes."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import ApiVersionsRequest as KApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse as KApiVersionsResponse
from kafka.protocol.metadata import MetadataRequest as KMetadataRequest
from kafka.protocol.metadata import MetadataResponse as KMetadataResponse
from kafka.protocol.producer import ProduceRequest as KProduceRequest

from millrace.gateway.kafka_protocol import codec

ApiVersionsRequest = codec.request_class(18)
ApiVersionsResponse = codec.response_class(18)
MetadataRequest = codec.request_class(3)
MetadataResponse = codec.response_class(3)
ProduceRequest = codec.request_class(0)


def _kafka_python_request(msg, correlation_id: int, client_id: str) -> bytes:
    msg.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(msg.encode(header=True, framed=True))


def test_api_versions_request_v3_literal_bytes() -> None:
    req = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    frame = codec.encode_request(18, 3, 1, req, client_id="cid")
    # size | key 18 | v3 | corr 1 | int16 "cid" | header tags | compact "x" | compact "1" | tags
    assert frame == b"\x00\x00\x00\x13\x00\x12\x00\x03\x00\x00\x00\x01\x00\x03cid\x00\x02x\x021\x00"


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_request_matches_kafka_python(version: int) -> None:
    kw = {"client_software_name": "millrace-test", "client_software_version": "0.1"} if version >= 3 else {}
    ours = codec.encode_request(18, version, 42, ApiVersionsRequest(**kw), client_id="golden")
    assert ours == _kafka_python_request(KApiVersionsRequest[version](**kw), 42, "golden")
    hdr, body = codec.decode_request(ours[4:])
    assert hdr.client_id == "golden" and body == ApiVersionsRequest(**kw)


@pytest.mark.parametrize("version", [0, 1, 4, 8, 9, 10, 12])
def test_metadata_request_matches_kafka_python(version: int) -> None:
    topics = [MetadataRequest.MetadataRequestTopic(name="orders"), MetadataRequest.MetadataRequestTopic(name="t2")]
    kw = {}
    ktopics = [KMetadataRequest.MetadataRequestTopic(name=t.name) for t in topics]
    if version >= 4:
        kw["allow_auto_topic_creation"] = False
    if 8 <= version <= 10:
        kw["include_cluster_authorized_operations"] = True
    if version >= 8:
        kw["include_topic_authorized_operations"] = True
    ours = codec.encode_request(3, version, 7, MetadataRequest(topics=topics, **kw), client_id="c")
    theirs = _kafka_python_request(KMetadataRequest[version](topics=ktopics, **kw), 7, "c")
    assert ours == theirs


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11])
def test_produce_request_matches_kafka_python(version: int) -> None:
    records = bytes(range(256)) * 3
    ours = ProduceRequest(
        transactional_id="tx" if version >= 3 else None,
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(index=3, records=records)]
            )
        ],
    )
    k = KProduceRequest[version](
        transactional_id="tx",
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            KProduceRequest.TopicProduceData(
                name="t",
                partition_data=[KProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=records)],
            )
        ],
    )
    frame = codec.encode_request(0, version, 9, ours, client_id="p")
    assert frame == _kafka_python_request(k, 9, "p")
    hdr, got = codec.decode_request(frame[4:])
    view = got.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and view.obj is not None and bytes(view) == records


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_response_decodes_kafka_python_bytes(version: int) -> None:
    keys = [KApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v) for k, v in [(0, 11), (1, 17)]]
    kw = {"throttle_time_ms": 5} if version >= 1 else {}
    k = KApiVersionsResponse[version](error_code=0, api_keys=keys, **kw)
    k.with_header(correlation_id=77)
    theirs = bytes(k.encode(header=True, framed=True))
    ours_obj = ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=a, min_version=0, max_version=b) for a, b in [(0, 11), (1, 17)]],
        **kw,
    )
    assert codec.encode_response(18, version, 77, ours_obj) == theirs
    hdr, got = codec.decode_response(18, version, theirs[4:])
    assert hdr.correlation_id == 77 and got == ours_obj


@pytest.mark.parametrize("version", [0, 1, 5, 9, 12])
def test_metadata_response_read_by_kafka_python(version: int) -> None:
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    resp = MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092, rack=None)],
        cluster_id="cluster-x" if version >= 2 else None,
        controller_id=1 if version >= 1 else -1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                error_code=0,
                name="orders",
                topic_id=tid if version >= 10 else uuid.UUID(int=0),
                partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                ],
            )
        ],
    )
    frame = codec.encode_response(3, version, 5, resp)
    k = KMetadataResponse[version].decode(frame, header=True, framed=True)
    assert k.topics[0].name == "orders"
    assert k.topics[0].partitions[0].replica_nodes == [1]
    assert k.brokers[0].host == "127.0.0.1" and k.brokers[0].port == 9092
    # and back: kafka-python's encoding of what it decoded is byte-identical to ours
    k.with_header(correlation_id=5)
    assert bytes(k.encode(header=True, framed=True)) == frame
