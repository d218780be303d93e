"""The log cleaner: runs compaction rounds (``compaction``) for compacted topics' partitions in the
background, one round per partition at a time, on its own thread so produce, fetch and the worker pool
never wait for it.

A round, for one partition:
1. (reactor) pick the cleaning point and snapshot the batches below it (``compaction.plan``);
2. (cleaner thread) check the compactions table still holds the version this partition was loaded or
   last compacted with, then write the next generation completely (``compaction.clean``);
3. (reactor) if the partition is still the installed one, store the new record in the compactions
   table, conditional on that version (worker pool);
4. (reactor) once durable, switch the partition's index for ``[log start, end)`` to the new generation
   (``PartitionLog.install_compaction``): from here every Fetch, ListOffsets and recovery sees it;
5. (reactor, after ``file.delete.delay.ms``, so fetches planned on the old layout finish) truncate the
   data segments below what every partition still needs, and delete the previous generation.

A SIGKILL anywhere leaves either the old record (the new generation is an orphan the next load or
round deletes) or the new one (the old generation is the orphan); data segments are truncated only
after step 4, so what the durable record names is always whole. Owned by the reactor thread.

The cleaner works for a ``CleanerHost`` (the partition storage that owns the partitions) and reaches
it only through that interface: it never changes partition state itself except through
``PartitionLog.install_compaction`` on the reactor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.store.contracts import SegmentService
from millrace.store.tables import NOT_EXISTS, TableStore
from millrace.streams.futures import to_deferred
from millrace.streams.partitions.compaction import (
    COMPACTIONS_TABLE,
    CleaningPlan,
    CleaningResult,
    CleaningStoppedError,
    CompactionRecord,
    clean,
    cleaning_point,
    delete_generation,
    needs_cleaning,
    plan,
)
from millrace.streams.partitions.formats import INDEX_ENTRY_SIZE
from millrace.streams.partitions.loading import log_start_key
from millrace.streams.partitions.partition import PartitionLog
from millrace.streams.partitions.segments import SegmentWriter
from millrace.streams.topics import TopicInfo

log = logging.getLogger(__name__)


class StaleCompactionError(Exception):
    """The compactions table moved on without this partition (a reload raced a round): reload it."""


class TopicLookup(Protocol):
    """The two questions the cleaner asks of the topic registry."""

    def stream_of(self, name: str) -> tuple[str, str]:
        """(scope, stream) of topic ``name``: where its compacted generations are written."""
        ...

    def record(self, key: str) -> TopicInfo | None:
        """The topic's current record (its configs), None once deleted."""
        ...


class CleanerHost(Protocol):
    """What the cleaner needs of the partition storage it runs for. Called on the reactor thread,
    except ``store`` and ``tables``, which the cleaner thread also uses (both are thread-safe)."""

    @property
    def store(self) -> SegmentService: ...

    @property
    def tables(self) -> TableStore: ...

    @property
    def topics(self) -> TopicLookup: ...

    @property
    def clock(self) -> IReactorTime: ...

    @property
    def blocking(self) -> Callable[..., defer.Deferred[Any]]:
        """Runs a blocking call on the worker pool; its Deferred fires on the reactor."""
        ...

    def loaded(self, name: str) -> list[PartitionLog] | None:
        """The installed partitions of topic ``name``, None when it is not loaded."""
        ...

    def is_reloading(self, topic: str) -> bool:
        """A reload of ``topic`` is under way: its installed partitions are about to be replaced."""
        ...

    def leads(self, p: PartitionLog) -> bool:
        """This node serves ``p`` now (on a cluster node, only that one cleans it)."""
        ...

    def reload(self, topic: str) -> None:
        """Rebuild ``topic``'s partitions from the store (the compactions table moved on under a round)."""
        ...

    def truncate_segments(self, topic: str) -> None:
        """Truncate ``topic``'s data segments below what every partition still needs."""
        ...


class LogCleaner:
    def __init__(self, host: CleanerHost) -> None:
        self._host = host
        self._running: set[tuple[str, int]] = set()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kafka-log-cleaner")
        self._stopping = threading.Event()
        self.rounds = 0  # rounds completed (for tests and metrics)

    def close(self) -> None:
        """Stop: a running round gives up at its next batch (before the store closes under it)."""
        self._stopping.set()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def clean_topic(self, topic: TopicInfo, now_ms: int | None = None, force: bool = False) -> list[defer.Deferred[bool]]:
        """Start a round for every partition of a compacted ``topic`` that needs one (Kafka's triggers:
        ``min.cleanable.dirty.ratio`` or ``max.compaction.lag.ms``; ``force`` cleans whatever is
        cleanable). Each Deferred fires with whether its round switched the partition."""
        if not topic.append_rules.compacted:
            return []
        parts = self._host.loaded(topic.name) or []
        for p in parts:
            p.folds = False  # plans and installs cut the index at batch boundaries from here on
        if self._host.is_reloading(topic.name) or self._stopping.is_set():
            return []
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        min_lag = int(topic.config("min.compaction.lag.ms"))
        max_lag = int(topic.config("max.compaction.lag.ms"))
        ratio = float(topic.config("min.cleanable.dirty.ratio"))
        rounds = []
        for p in parts:
            if (p.topic, p.partition) in self._running or not self._host.leads(p):
                continue  # on a cluster node, only the node serving a partition cleans it
            end = cleaning_point(p, now_ms, min_lag)
            cleaned = p.compaction.end if p.compaction is not None else p.log_start
            if end <= cleaned:
                continue
            if not force and not needs_cleaning(p, cleaned, end, now_ms, ratio, max_lag):
                continue
            rounds.append(self._round(topic, p, end, now_ms))
        return rounds

    def _round(self, topic: TopicInfo, p: PartitionLog, end: int, now_ms: int) -> defer.Deferred[bool]:
        key = (p.topic, p.partition)
        self._running.add(key)
        scope, stream = self._host.topics.stream_of(topic.name)
        generation = p.compaction.generation + 1 if p.compaction is not None else 1
        the_plan = plan(p, scope, stream, generation, end, now_ms, int(topic.config("delete.retention.ms")))
        version = p.compaction_version
        started = time.monotonic()
        d = to_deferred(self._executor.submit(self._clean, the_plan, version))
        d.addCallback(self._store_record, p, started)

        def finished(result: Any) -> Any:
            self._running.discard(key)
            if isinstance(result, Failure):
                if result.check(CleaningStoppedError):
                    log.info("compacting %r stopped: the server is shutting down", p)
                    return False
                if result.check(StaleCompactionError):
                    self._host.reload(p.topic)
                log.warning("compacting %r failed: %s", p, result.getErrorMessage())
                return False
            return result

        return d.addBoth(finished)

    def _clean(self, the_plan: CleaningPlan, version: int | None) -> CleaningResult:
        """Cleaner thread: the new generation, if this partition's record is still the one it knows."""
        tables = self._host.tables
        (current,) = tables.get(COMPACTIONS_TABLE, [log_start_key(the_plan.topic, the_plan.partition)])
        if (current.version if current is not None else None) != version:
            raise StaleCompactionError(f"{the_plan.topic}-{the_plan.partition}: compactions record moved on")
        return clean(self._host.store, the_plan, self._stopping.is_set)

    def _installed(self, p: PartitionLog) -> bool:
        parts = self._host.loaded(p.topic)
        return (parts is not None and p.partition < len(parts) and parts[p.partition] is p
                and not self._host.is_reloading(p.topic))

    def _store_record(self, result: CleaningResult, p: PartitionLog, started: float) -> defer.Deferred[bool]:
        """Reactor: make the new generation current in the compactions table, then in memory."""
        the_plan = result.plan
        if not self._installed(p):
            return self._discard(the_plan.segment)
        record = CompactionRecord(the_plan.generation, the_plan.segment, result.end, p.log_start)
        expected: Any = p.compaction_version if p.compaction_version is not None else NOT_EXISTS
        key = log_start_key(p.topic, p.partition)
        d = self._host.blocking(self._host.tables.put, COMPACTIONS_TABLE, [(key, record.encode(), expected)])

        def switch(versions: list[int]) -> bool:
            writer = SegmentWriter(self._host.store, self._host.clock, the_plan.segment, result.tail,
                                   len(result.entries) * INDEX_ENTRY_SIZE)
            if not self._installed(p):
                # The table names the new generation; a reload of the topic (running now) loads it.
                return False
            previous = p.install_compaction(writer, result.entries, record, versions[0], result.removed_markers)
            self.rounds += 1
            log.info("compacted %r below offset %d: %d of %d records kept in %.2f s", p, record.end,
                     result.records_out, result.records_in, time.monotonic() - started)
            topic = self._host.topics.record(p.topic)
            delay = int(topic.config("file.delete.delay.ms")) / 1000 if topic is not None else 0.0
            self._host.clock.callLater(delay, self._after_delay, p.topic, previous)
            return True

        # A failed write may still have landed (an unknown outcome): the new generation is left for the
        # next round, which finds the table moved on (a reload) or deletes it before writing it again.
        return d.addCallback(switch)

    def _after_delay(self, topic: str, previous: SegmentWriter | None) -> None:
        """Once fetches planned on the old layout are done: free what no partition references."""
        self._host.truncate_segments(topic)
        if previous is not None:
            to_deferred(self._executor.submit(delete_generation, self._host.store, previous.name)).addErrback(
                lambda f: log.warning("deleting %s failed: %s", previous.name, f.getErrorMessage()))

    def _discard(self, segment: str) -> defer.Deferred[bool]:
        return to_deferred(self._executor.submit(delete_generation, self._host.store, segment)).addBoth(
            lambda _: False)
