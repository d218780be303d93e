"""Serializers: how events become the bytes a stream stores, and back."""

from __future__ import annotations

import json
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class Serializer(Protocol[T]):
    def serialize(self, event: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...


class BytesSerializer:
    """Events are bytes already (the default)."""

    def serialize(self, event: bytes) -> bytes:
        if not isinstance(event, (bytes, bytearray, memoryview)):
            raise TypeError(f"BytesSerializer writes bytes, not {type(event).__name__}")
        return bytes(event)

    def deserialize(self, data: bytes) -> bytes:
        return data


class StringSerializer:
    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def serialize(self, event: str) -> bytes:
        return event.encode(self.encoding)

    def deserialize(self, data: bytes) -> str:
        return data.decode(self.encoding)


class JsonSerializer(Generic[T]):
    """Any JSON value, as compact UTF-8 JSON."""

    def serialize(self, event: T) -> bytes:
        return json.dumps(event, separators=(",", ":")).encode()

    def deserialize(self, data: bytes) -> Any:
        return json.loads(data)
