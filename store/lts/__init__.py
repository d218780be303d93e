"""Tier 2: long-term storage of segment data as write-once chunks."""

from millrace.store.lts.interface import ChunkStorage

__all__ = ["ChunkStorage"]
