"""Controller commands of the native protocol. Controller calls block on table-segment I/O, so
they run on a worker pool, never on the reactor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from millrace.gateway.native.dispatch import Handler, Handlers, handlers, serve
from millrace.protocol import messages as m
from millrace.protocol.errors import InvalidRequestError
from millrace.protocol.messages import Request
from millrace.protocol.wire import Command
from millrace.store.controller import (
    Controller,
    EpochRecord,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    SegmentRange,
    StreamConfiguration,
    segment_name,
)
from millrace.store.controller.subscribers import Subscribers
from millrace.store.errors import SegmentNotFoundError
from millrace.store.futures import StoreFuture

if TYPE_CHECKING:
    from millrace.streams.scaling import StreamScaling
    from millrace.streams.segment_gate import SegmentGate
_Req = TypeVar("_Req", bound=Request)

# A partitioned stream's slices [(start, end)] by partition (None for a retired one), or None for a
# stream that has no partitions.
PartitionsOf = Callable[[str, str], Sequence[tuple[float, float] | None] | None]


def describe_stream(
    controller: Controller, scope: str, stream: str, partitions_of: PartitionsOf | None = None
) -> m.StreamDescriptionReply:
    """A stream as the native client, the CLI and the HTTP API see it (blocking: controller and store
    calls); ``m.StreamDescriptionReply`` says what each field means."""
    info = controller.get_stream(scope, stream)
    # Segments come from the history's last epoch, so the two always agree even if a scale
    # commits between these calls.
    history = controller.get_epoch_history(scope, stream)
    current = history[-1]
    slices = partitions_of(scope, stream) if partitions_of is not None else None
    store = controller.store
    described = []
    for seg in current.ranges(scope, stream):
        partitions = None if slices is None else tuple(
            p for p, s in enumerate(slices) if s is not None and seg.contains(s[0]))
        known: dict[str, Any] = {"length": None, "storage_length": None, "start_offset": None, "sealed": None,
                                 "rates": ()}
        try:
            si = store.get_info(seg.name)
            rates = store.segment_rates(seg.name)
        except SegmentNotFoundError:
            pass  # a stream being created or deleted: show the range without store facts
        else:
            known = {"length": si.length, "storage_length": si.storage_length, "start_offset": si.start_offset,
                     "sealed": si.sealed, "rates": tuple(
                         m.SegmentRate(window_s=w, events_per_s=ev, bytes_per_s=by, kib_per_s=by / 1024,
                                       warm=rates.warm(i))
                         for i, (w, ev, by) in enumerate(zip(rates.windows, rates.events_per_s, rates.bytes_per_s,
                                                             strict=True)))}
        described.append(m.SegmentDescription(
            segment_id=seg.segment_id, name=seg.name, number=seg.number, epoch=seg.creation_epoch,
            key_start=seg.key_start, key_end=seg.key_end, container=store.container_id_of(seg.name),
            partitions=partitions, **known))
    cfg = info.config
    pending = info.pending_scale
    return m.StreamDescriptionReply(
        scope=scope,
        stream=stream,
        state=info.state.name.lower(),
        epoch=current.epoch,
        created_ms=info.created_ms,
        config=m.StreamConfigFields(
            initial_segments=cfg.initial_segments,
            scaling=m.ScalingFields(type=cfg.scaling.type.name.lower(), target_rate=cfg.scaling.target_rate,
                                    scale_factor=cfg.scaling.scale_factor, min_segments=cfg.scaling.min_segments),
            retention=m.RetentionFields(type=cfg.retention.type.name.lower(), value=cfg.retention.value)),
        truncation={str(k): v for k, v in info.truncation.items()},
        partition_count=None if slices is None else len(slices),
        rate_windows=tuple(float(w) for w in store.rate_config.windows),
        segments=tuple(described),
        history=_history(scope, stream, history),
        pending_scale=None if pending is None else m.PendingScale(
            epoch=pending.epoch, reason=pending.reason, created_ms=pending.created_ms,
            sealed_ids=tuple(pending.sealed),
            created=tuple(_range(scope, stream, sid, lo, hi) for sid, lo, hi in pending.successors)),
        tags=cfg.tags or None,
    )


def _range(scope: str, stream: str, sid: int, lo: float | None, hi: float | None) -> m.KeyRange:
    return m.KeyRange(segment_id=sid, name=segment_name(scope, stream, sid), key_start=lo, key_end=hi)


def _history(scope: str, stream: str, history: list[EpochRecord]) -> tuple[m.EpochDescription, ...]:
    """Each epoch with what its scale sealed (ranges from the epoch before) and created."""
    out = []
    previous: dict[int, tuple[float, float]] = {}
    for epoch in history:
        ranges = {sid: (lo, hi) for sid, lo, hi in epoch.segments}
        sealed = epoch.sealed_ids
        created = epoch.created_ids
        out.append(m.EpochDescription(
            epoch=epoch.epoch,
            created_ms=epoch.created_ms,
            reason=epoch.reason,
            sealed_ids=tuple(sealed),
            created_ids=tuple(created),
            sealed=tuple(_range(scope, stream, sid, *previous.get(sid, (None, None))) for sid in sealed),
            created=tuple(_range(scope, stream, sid, *ranges[sid]) for sid in created),
        ))
        previous = ranges
    return tuple(out)


def stream_configuration(request: m.StreamConfigRequest) -> StreamConfiguration:
    scaling, retention = request.scaling, request.retention
    try:
        config = StreamConfiguration(
            initial_segments=request.initial_segments,
            scaling=ScalingPolicy(ScalingType[scaling.type.upper()], scaling.target_rate, scaling.scale_factor,
                                  scaling.min_segments),
            retention=RetentionPolicy(RetentionType[retention.type.upper()], retention.value),
            tags=request.tags or (),
        )
    except KeyError as exc:
        raise InvalidRequestError(f"no such policy type {exc}") from None
    config.validate()
    return config


def on_pool(pool: ThreadPoolExecutor, fn: Callable[[_Req, bytes], object]) -> Callable[[_Req, bytes], StoreFuture]:
    """A command handler that runs ``fn(request, payload)`` (blocking) on ``pool``; its result or
    exception completes the returned future."""
    def run(request: _Req, payload: bytes) -> StoreFuture:
        result: StoreFuture = StoreFuture()

        def call() -> None:
            try:
                result.set_result(fn(request, payload))
            except Exception as exc:  # noqa: BLE001 - becomes an error status for the caller
                result.set_exception(exc)

        pool.submit(call)
        return result

    return run


def controller_handlers(
    controller: Controller, pool: ThreadPoolExecutor, scaler: StreamScaling, gate: SegmentGate,
    partitions_of: PartitionsOf | None = None, delete_stream: Callable[[str, str], None] | None = None,
) -> Handlers:
    """``gate``: the stream layer's rules, which creations, seals and truncations pass (scales pass them in
    the scaler). ``scaler`` performs manual splits and merges (for Kafka topics it also moves the
    partition writers, so it is the gateway's, not the bare controller's). ``partitions_of(scope, stream)``
    gives a Kafka topic's partition slices (None for other streams), for descriptions.
    ``delete_stream(scope, stream)`` deletes a sealed stream (blocking); the gateway's also drops the
    partitions event writers gave it (default: the controller's alone)."""
    def blocking(request: type[_Req], fn: Callable[[_Req], object]) -> tuple[Command, Handler]:
        return serve(request, on_pool(pool, lambda r, _payload: fn(r)))

    c = controller
    delete_segments = delete_stream if delete_stream is not None else c.delete_stream
    subscribers = Subscribers(c)

    def delete(scope: str, stream: str) -> None:
        delete_segments(scope, stream)
        subscribers.forget_stream(scope, stream)  # a stream re-created under the name starts afresh

    def subscriber_cuts(r: m.ListSubscriberCuts) -> m.SubscriberCutsReply:
        return m.SubscriberCutsReply(cuts={name: {segment_name(r.scope, r.stream, sid): off for sid, off in cut.items()}
                                           for name, cut in subscribers.cuts(r.scope, r.stream).items()})

    def describe(scope: str, stream: str) -> m.StreamDescriptionReply:
        return describe_stream(c, scope, stream, partitions_of)

    def create(r: m.CreateStream) -> m.StreamDescriptionReply:
        gate.check_create_stream(r.scope, r.stream)
        c.create_stream(r.scope, r.stream, stream_configuration(r))
        return describe(r.scope, r.stream)

    def split(r: m.SplitSegment) -> m.StreamDescriptionReply:
        scaler.split(r.scope, r.stream, r.segment, r.pieces, None if r.at is None else list(r.at))
        return describe(r.scope, r.stream)

    def merge(r: m.MergeSegments) -> m.StreamDescriptionReply:
        scaler.merge(r.scope, r.stream, list(r.segments))
        return describe(r.scope, r.stream)

    def seal(r: m.SealStream) -> None:
        gate.check_seal_stream(r.scope, r.stream)
        c.seal_stream(r.scope, r.stream)

    def subscriber_cut(r: m.UpdateSubscriberCut) -> None:
        if r.cut is not None:  # consumption-based retention truncates there
            gate.check_truncate_stream(r.scope, r.stream, r.cut, retention_cut=True)
        subscribers.update(r.scope, r.stream, r.subscriber, None if r.cut is None else _cut(r.cut))

    def truncate(r: m.TruncateStream) -> None:
        gate.check_truncate_stream(r.scope, r.stream, r.cut)
        c.truncate_stream(r.scope, r.stream, _cut(r.cut))

    return handlers(
        blocking(m.CreateScope, lambda r: m.CreatedReply(created=c.create_scope(r.scope))),
        blocking(m.DeleteScope, lambda r: c.delete_scope(r.scope)),
        blocking(m.ListScopes, lambda r: m.ScopesReply(scopes=tuple(c.list_scopes()))),
        blocking(m.CreateStream, create),
        blocking(m.UpdateStream, lambda r: m.VersionReply(version=c.update_stream(
            r.scope, r.stream, stream_configuration(r), r.expected_version))),
        blocking(m.DescribeStream, lambda r: describe(r.scope, r.stream)),
        blocking(m.ListStreams, lambda r: m.StreamsReply(streams=tuple(c.list_streams(r.scope, r.tag)))),
        blocking(m.GetSegmentForKey, lambda r: _segment(c.get_segment_for_key(r.scope, r.stream, r.key))),
        blocking(m.SealStream, seal),
        blocking(m.DeleteStream, lambda r: delete(r.scope, r.stream)),
        blocking(m.TruncateStream, truncate),
        blocking(m.UpdateSubscriberCut, subscriber_cut),
        blocking(m.ListSubscriberCuts, subscriber_cuts),
        blocking(m.SplitSegment, split),
        blocking(m.MergeSegments, merge),
    )


def _cut(cut: dict[str, int]) -> dict[int | str, int]:
    """A stream cut by segment name (JSON keys are strings; the controller reads one as a name)."""
    return {name: offset for name, offset in cut.items()}


def _segment(seg: SegmentRange) -> m.SegmentRangeReply:
    return m.SegmentRangeReply(segment_id=seg.segment_id, name=seg.name, key_start=seg.key_start,
                               key_end=seg.key_end)
