"""A minimal Kafka client over a raw socket, speaking our own codec, for tests.

``send`` is one request and its response. ``submit`` and ``receive`` split the two so a test can
leave a request parked on the broker (a JoinGroup waiting for a rebalance) while it drives others;
responses arrive in request order on a connection, as Kafka guarantees.
"""

from __future__ import annotations

import collections
import socket
import struct
from typing import Any

from millrace.gateway.kafka_protocol.codec import decode_response, encode_request, request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode

PRODUCE, FETCH, LIST_OFFSETS, METADATA, CREATE_TOPICS = 0, 1, 2, 3, 19
NOT_CONTROLLER = int(ErrorCode.NOT_CONTROLLER)


class KafkaWire:
    def __init__(self, host: str, port: int, client_id: str = "millrace-test", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self._cid = 0
        self._inflight: collections.deque[tuple[int, int, int]] = collections.deque()

    @classmethod
    def connect(cls, bootstrap: str, **kwargs: Any) -> KafkaWire:
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), **kwargs)

    def send(self, api_key: int, version: int, request: Any) -> Any:
        """Send one request and return its decoded response body."""
        self.submit(api_key, version, request)
        return self.receive()

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """``send`` with the request built from keyword fields."""
        return self.send(api_key, version, request_class(api_key)(**fields))

    def submit(self, api_key: int, version: int, request: Any) -> int:
        """Send without waiting; returns the correlation id."""
        self._cid += 1
        self.sock.sendall(encode_request(api_key, version, self._cid, request, client_id=self.client_id))
        self._inflight.append((api_key, version, self._cid))
        return self._cid

    def submit_together(self, requests: list[tuple[int, int, Any]]) -> None:
        """Send (api key, version, request)s in one write, so the broker reads them all before it
        answers any: a pipelining client at its most eager."""
        frames = []
        for api_key, version, request in requests:
            self._cid += 1
            frames.append(encode_request(api_key, version, self._cid, request, client_id=self.client_id))
            self._inflight.append((api_key, version, self._cid))
        self.sock.sendall(b"".join(frames))

    def receive(self, timeout: float | None = None) -> Any:
        """The response to the oldest submitted request (blocks up to ``timeout``)."""
        api_key, version, cid = self._inflight[0]
        previous = self.sock.gettimeout()
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            (size,) = struct.unpack(">i", self._recv(4))
            frame = self._recv(size)
        finally:
            self.sock.settimeout(previous)
        self._inflight.popleft()
        header, body = decode_response(api_key, version, frame)
        if header.correlation_id != cid:
            raise AssertionError(f"response to correlation id {header.correlation_id}, expected {cid}")
        return body

    def pending(self) -> int:
        return len(self._inflight)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- conveniences for the common requests ---------------------------------------------------------
    def producer_id(self) -> int:
        """An idempotent producer id from InitProducerId: the server binds it to this connection's
        principal and refuses batches under ids it did not issue to it."""
        init = self.request(22, 4, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                            producer_epoch=-1)
        assert init.error_code == 0, init
        return int(init.producer_id)

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, version: int = 9) -> Any:
        """Produce one batch; the partition's response."""
        P = request_class(PRODUCE)  # noqa: N806 - a generated message class
        r = self.send(PRODUCE, version, P(acks=acks, timeout_ms=10000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])]))
        return r.responses[0].partition_responses[0]

    def fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1,
              max_bytes: int = 1 << 22, version: int = 12) -> Any:
        """Fetch one partition by name (v12); the partition's data."""
        F = request_class(FETCH)  # noqa: N806 - a generated message class
        r = self.send(FETCH, version, F(
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])]))
        return r.responses[0].partitions[0]

    def list_offset(self, topic: str, partition: int, timestamp: int, version: int = 7) -> Any:
        L = request_class(LIST_OFFSETS)  # noqa: N806 - a generated message class
        r = self.send(LIST_OFFSETS, version, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(
            name=topic, partitions=[L.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)])]))
        return r.topics[0].partitions[0]

    def metadata(self, version: int, names: list[str] | None, **kw: Any) -> Any:
        """Metadata for ``names``; None asks for every topic."""
        M = request_class(METADATA)  # noqa: N806 - a generated message class
        request = M(topics=[M.MetadataRequestTopic(name=n) for n in names or ()], **kw)
        if names is None:
            request.topics = None  # the constructor turns None into the default, []
        return self.send(METADATA, version, request)

    def create(self, name: str, partitions: int = 1, version: int = 7, **configs: str) -> Any:
        """CreateTopics for one topic (config names with "_" for "."); asserts success."""
        CT = request_class(CREATE_TOPICS)  # noqa: N806 - a generated message class
        req = CT(topics=[CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, configs=[
            CT.CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()])],
            timeout_ms=10000)
        result = self.send(CREATE_TOPICS, version, req).topics[0]
        if result.error_code == NOT_CONTROLLER:
            # A cluster node that is not the controller: as Kafka clients do, send it to the controller
            # that Metadata names.
            answer = self.metadata(12, [])
            node = next(b for b in answer.brokers if b.node_id == answer.controller_id)
            with KafkaWire(node.host, node.port) as controller:
                return controller.create(name, partitions, version, **configs)
        assert result.error_code == 0, result
        return result


def local(port: int, client_id: str = "millrace-test") -> KafkaWire:
    """A connection to a broker on 127.0.0.1."""
    return KafkaWire("127.0.0.1", port, client_id=client_id)
