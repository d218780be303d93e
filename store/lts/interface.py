"""Chunk storage: the small interface long-term storage backends implement.

Chunks are written once, whole, and never modified; segments are sequences of chunks whose
layout the segment container records in its own metadata. Writing a chunk whose name already
exists is an error, so a zombie container can never overwrite a chunk a newer owner wrote.
All methods block; containers call them from worker threads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class ChunkStorage(ABC):
    @abstractmethod
    def write(self, name: str, data: bytes) -> None:
        """Create chunk ``name`` holding ``data`` durably. Raises ChunkExistsError if present."""

    @abstractmethod
    def read(self, name: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset``. Raises ChunkNotFoundError."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove the chunk; deleting an absent chunk is not an error."""

    @abstractmethod
    def exists(self, name: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Names of chunks starting with ``prefix`` (for garbage collection of orphans)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and connections."""
