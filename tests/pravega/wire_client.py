"""A bare Pravega WireCommands client for the tests: a socket, the codec, one reply at a time. What
Pravega's official client does not let a test do (send a bad frame, set up a writer twice, read a
segment's raw bytes) goes through this."""

from __future__ import annotations

import socket
import uuid
from types import TracebackType

from millrace.gateway.pravega_protocol import FrameDecoder, WireCommand
from millrace.gateway.pravega_protocol import commands as wc
from millrace.gateway.pravega_protocol.appends import encode_append
from millrace.gateway.pravega_protocol.base import (
    NULL_ATTRIBUTE_VALUE,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
)


class WireClient:
    def __init__(self, port: int, hello: bool = True, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.decoder = FrameDecoder()
        self.pending: list[WireCommand] = []
        self.request_id = 0
        if hello:
            reply = self.call(wc.Hello(high_version=WIRE_VERSION, low_version=OLDEST_COMPATIBLE_VERSION))
            assert isinstance(reply, wc.Hello), reply

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.sock.close()

    def next_id(self) -> int:
        self.request_id += 1
        return self.request_id

    def send(self, data: bytes | WireCommand) -> None:
        self.sock.sendall(data if isinstance(data, bytes) else data.encode())

    def receive(self) -> WireCommand:
        """The next reply; ConnectionError once the server closed the connection."""
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def call(self, command: WireCommand) -> WireCommand:
        self.send(command)
        return self.receive()

    def closed_by_server(self) -> bool:
        """Whether the server closes the connection (after any replies still on their way)."""
        try:
            while True:
                self.receive()
        except (ConnectionError, OSError):
            return True

    def setup(self, segment: str, writer: uuid.UUID) -> WireCommand:
        return self.call(wc.SetupAppend(request_id=self.next_id(), writer_id=writer, segment=segment))

    def append(self, writer: uuid.UUID, events: list[bytes], last_event_number: int) -> WireCommand:
        self.send(encode_append(writer, events, last_event_number, self.next_id()))
        return self.receive()

    def read(self, segment: str, offset: int, length: int = 1 << 20) -> WireCommand:
        return self.call(wc.ReadSegment(segment=segment, offset=offset, suggested_length=length,
                                        request_id=self.next_id()))

    def read_all(self, segment: str) -> bytes:
        """Every byte of a sealed or idle segment, from its start."""
        info = self.info(segment)
        out = bytearray()
        offset = info.start_offset
        while offset < info.write_offset:
            reply = self.read(segment, offset)
            assert isinstance(reply, wc.SegmentRead), reply
            out += reply.data
            offset += len(reply.data)
        return bytes(out)

    def info(self, segment: str) -> wc.StreamSegmentInfo:
        reply = self.call(wc.GetStreamSegmentInfo(request_id=self.next_id(), segment_name=segment))
        assert isinstance(reply, wc.StreamSegmentInfo), reply
        return reply

    def attribute(self, segment: str, key: uuid.UUID) -> int | None:
        reply = self.call(wc.GetSegmentAttribute(request_id=self.next_id(), segment_name=segment, attribute_id=key))
        assert isinstance(reply, wc.SegmentAttribute), reply
        return None if reply.value == NULL_ATTRIBUTE_VALUE else reply.value
