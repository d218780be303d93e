"""Scaling partitioned streams (Kafka topics, and the streams of other scopes that native writers have
partitioned). A Kafka topic splits and merges only at its partition-slice boundaries (its clients see
its partitions); a native stream splits anywhere, its partitions carved at the new boundaries first
(``TopicRegistry.carve``). Either way the partition writers move to the successors between the
successors' creation and the predecessors' seal, so no append is lost, duplicated or reordered per
partition across the switch."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from millrace.store.controller import (
    Controller,
    InvalidScaleError,
    ScaleReason,
    SegmentRange,
    parse_segment_name,
    segment_name,
)
from millrace.store.controller.scaling import equal_split_points
from millrace.streams.futures import call_on_reactor
from millrace.streams.host import StreamHost
from millrace.streams.segment_gate import check_scalable

if TYPE_CHECKING:
    from millrace.store.containers.rates import SegmentRates

log = logging.getLogger(__name__)


def _nearest(allowed: list[float], point: float) -> float:
    """The allowed split point closest to ``point`` (the lower one on a tie)."""
    return min(allowed, key=lambda candidate: (abs(candidate - point), candidate))


class ScopeConfig(Protocol):
    @property
    def scope(self) -> str:
        """The scope whose streams are Kafka topics."""
        ...


class ScalingHost(StreamHost, Protocol):
    """What scaling needs of its host: the stream layer's parts, the controller and the Kafka scope."""

    @property
    def controller(self) -> Controller: ...

    @property
    def config(self) -> ScopeConfig: ...


class StreamScaling:
    """Manual and automatic splits and merges of a stream, kept on partition boundaries where the
    stream is partitioned; used by both protocol adapters and the auto-scaler."""

    def __init__(self, broker: ScalingHost) -> None:
        self.broker = broker
        self.controller: Controller = broker.controller
        self.scope: str = broker.config.scope

    def is_topic(self, scope: str, stream: str) -> bool:
        """A Kafka topic: its segments hold whole partitions, which never change."""
        topic = self.broker.topics.of_stream(scope, stream)
        return topic is not None and topic.kafka_view

    # -- the auto-scaler's callbacks (worker thread) -----------------------------------------------
    def boundaries(self, scope: str, stream: str, segment: SegmentRange) -> list[float]:
        """Where a segment may split: partition-slice starts strictly inside it (Kafka topics); anywhere
        for other streams (equal splits)."""
        topic = self.broker.topics.of_stream(scope, stream)
        if topic is None or not topic.kafka_view:
            return [segment.key_start + (segment.key_end - segment.key_start) * i / 8 for i in range(1, 8)]
        return sorted(lo for lo, _ in topic.slices if segment.key_start < lo < segment.key_end)

    def execute(self, scope: str, stream: str, seal: list[int], new_ranges: list[tuple[float, float]],
                reason: str) -> Any:
        """Scale a stream; for a topic, validate the ranges against its partitions and switch its
        partition writers before the predecessors are sealed (blocking; worker thread)."""
        topic = self.broker.topics.of_stream(scope, stream)
        if topic is None:
            check_scalable(self.controller.store, [segment_name(scope, stream, sid) for sid in seal])
            return self.controller.scale_stream(scope, stream, seal, new_ranges, reason)
        if not topic.kafka_view:
            # Before the carve: a scale the controller refuses must not add partitions for nothing.
            self.controller.check_scale(scope, stream, seal, new_ranges)
            topic = self.broker.topics.carve(topic.name, sorted({x for r in new_ranges for x in r}))
        starts = {lo for lo, _ in topic.slices}
        for lo, hi in new_ranges:
            if lo not in starts and lo != 0.0:
                raise InvalidScaleError(f"{scope}/{stream}: {lo} is not a partition boundary; segments of a "
                                        f"topic hold whole partitions")
            if hi not in starts and hi != 1.0:
                raise InvalidScaleError(f"{scope}/{stream}: {hi} is not a partition boundary; segments of a "
                                        f"topic hold whole partitions")

        def before_seal(successors: list[SegmentRange]) -> None:
            self.broker.partitions.prepare_successors([s.name for s in successors])
            current = self.broker.topics.of_stream(scope, stream)
            if current is None:
                return  # deleted meanwhile: no partition writes to it any more
            moved = call_on_reactor(self.broker.partitions.switch_segments, current, successors)
            log.info("%s/%s: %d partitions switched to %s", scope, stream, moved, [s.name for s in successors])

        return self.controller.scale_stream(scope, stream, seal, new_ranges, reason, before_seal=before_seal)

    # -- manual scaling (CLI, HTTP, native protocol; worker thread) ------------------------------------
    def open_segment(self, scope: str, stream: str, segment: int | str) -> SegmentRange:
        """An open segment of the stream, given by id, by number in the current epoch, or by name;
        InvalidScaleError for anything else (a sealed or unknown segment cannot scale)."""
        current = self.controller.get_current_segments(scope, stream)
        if isinstance(segment, str) and not segment.isdigit():
            try:
                found_scope, found_stream, sid = parse_segment_name(segment)
            except ValueError as exc:
                raise InvalidScaleError(str(exc)) from None
            if (found_scope, found_stream) != (scope, stream):
                raise InvalidScaleError(f"{segment} is not a segment of {scope}/{stream}")
            match = [s for s in current if s.segment_id == sid]
        else:
            value = int(segment)
            match = [s for s in current if value in (s.segment_id, s.number)]
        if not match:
            raise InvalidScaleError(f"{scope}/{stream} has no open segment {segment}")
        return match[0]

    def split(self, scope: str, stream: str, segment: int | str, pieces: int = 2,
              at: list[float] | None = None) -> Any:
        """Split an open segment into ``pieces`` (at partition boundaries for a topic), or at ``at``."""
        seg = self.open_segment(scope, stream, segment)
        sid = seg.segment_id
        if at is None:
            if pieces < 2:
                raise InvalidScaleError("a split needs at least two pieces")
            ideal = equal_split_points(seg.key_start, seg.key_end, pieces)
            if self.is_topic(scope, stream):
                allowed = self.boundaries(scope, stream, seg)
                if not allowed:
                    raise InvalidScaleError(f"{seg.name} holds a single partition and cannot split")
                at = sorted({_nearest(allowed, x) for x in ideal})
            else:
                at = ideal
        bounds = [seg.key_start, *sorted(at), seg.key_end]
        return self.execute(scope, stream, [sid], list(zip(bounds, bounds[1:], strict=False)), ScaleReason.MANUAL)

    def merge(self, scope: str, stream: str, segments: list[int | str]) -> Any:
        """Merge adjacent open segments into one."""
        chosen = sorted((self.open_segment(scope, stream, s) for s in segments), key=lambda s: s.key_start)
        ids = [s.segment_id for s in chosen]
        if len(set(ids)) < 2 or any(a.key_end != b.key_start for a, b in zip(chosen, chosen[1:], strict=False)):
            raise InvalidScaleError("a merge needs two or more adjacent open segments")
        return self.execute(scope, stream, ids, [(chosen[0].key_start, chosen[-1].key_end)], ScaleReason.MANUAL)

    def grow_partitions(self, scope: str, stream: str, segment: SegmentRange, rates: SegmentRates) -> None:
        """A single-partition segment that stays too hot: if the topic allows it
        (millrace.scaling.grow.partitions=true), add a partition carved from the hot one's slice, so
        the next round can split the segment between them. Kafka clients see it on metadata refresh."""
        topic = self.broker.topics.get(stream) if scope == self.scope else None
        if topic is None or topic.config("millrace.scaling.grow.partitions") != "true":
            return
        hot = next((p for p, (lo, _) in enumerate(topic.slices) if segment.contains(lo)), None)
        if hot is None:
            return
        grown = self.broker.topics.add_partitions(stream, topic.partition_count + 1, split_from=hot)
        log.info("%s/%s: partition %d stayed hot; grew the topic to %d partitions", scope, stream, hot,
                 grown.partition_count)
