"""Tier 1: the write-ahead log each segment container writes its operations to."""

from millrace.store.durablelog.interface import DurableDataLog, LogAddress, LogEntry

__all__ = ["DurableDataLog", "LogAddress", "LogEntry"]
