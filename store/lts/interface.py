"""Chunk storage: the small interface long-term storage backends implement.

Chunks are written once, whole, and never modified; segments are sequences of chunks whose
layout the segment container records in its own metadata. Writing a chunk whose name already
exists is an error, so a zombie container can never overwrite a chunk a newer owner wrote.
All methods block; containers call them from worker threads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from millrace.store.fsutil import Buffer


class ChunkStorage(ABC):
    @abstractmethod
    def write_parts(self, name: str, parts: Sequence[Buffer]) -> None:
        """Create chunk ``name`` holding ``parts`` back to back, durably. Raises ChunkExistsError if
        present. The storage writer hands over the read cache's blocks as they are: a backend that
        can write them without joining them (the filesystem's ``pwritev``) spares a copy of every byte."""

    def write(self, name: str, data: Buffer) -> None:
        """Create chunk ``name`` holding ``data`` durably. Raises ChunkExistsError if present."""
        self.write_parts(name, (data,))

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
