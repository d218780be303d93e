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
from millrace.store.errors import SegmentNotFoundError
from millrace.store.futures import StoreFuture

if TYPE_CHECKING:
    from millrace.streams.scaling import StreamScaling
_Req = TypeVar("_Req", bound=Request)

# A Kafka topic's partition slices [(start, end)] by partition, or None for a stream that is no topic.
PartitionsOf = Callable[[str, str], Sequence[tuple[float, float]] | None]


def describe_stream(
    controller: Controller, scope: str, stream: str, partitions_of: PartitionsOf | None = None
) -> dict[str, Any]:
    """A stream as the CLI and HTTP API show it (blocking: controller and store calls).

    The JSON is stable; fields are only ever added::

        {"scope": str, "stream": str,
         "state": "active" | "scaling" | "sealing" | "sealed" | ...,
         "epoch": int,                      # the current epoch (the last one in "history")
         "created_ms": int,
         "config": {"initial_segments": int,
                    "scaling": {"type": str, "target_rate": int, "scale_factor": int, "min_segments": int},
                    "retention": {"type": str, "value": int}},
         "truncation": {segment_id (str): offset},
         "partition_count": int | null,     # a Kafka topic's partitions; null for other streams
         "rate_windows": [float],           # seconds, shortest first
         "segments": [                      # the current epoch's segments, by key range
             {"segment_id": int, "name": str, "number": int, "epoch": int (that created it),
              "key_start": float, "key_end": float, "container": int,
              "partitions": [int] | null,   # topic partitions whose slice starts in the range
              "length": int | null, "storage_length": int | null, "start_offset": int | null,
              "sealed": bool | null,        # null: the store does not know the segment
              "rates": [{"window_s": float, "events_per_s": float, "bytes_per_s": float,
                         "kib_per_s": float, "warm": bool (a whole window measured)}]}],
         "history": [                       # every epoch, oldest first
             {"epoch": int, "created_ms": int, "reason": "create" | "manual" | "scale-up" | "scale-down",
              "sealed_ids": [int] (ascending), "created_ids": [int],
              "sealed": [{"segment_id", "name", "key_start", "key_end"}],
              "created": [{"segment_id", "name", "key_start", "key_end"}]}],
         "pending_scale": null | {"epoch": int, "reason": str, "created_ms": int, "sealed_ids": [int],
                                  "created": [{"segment_id", "name", "key_start", "key_end"}]}}
    """
    info = controller.get_stream(scope, stream)
    # Segments come from the history's last epoch, so the two always agree even if a scale
    # commits between these calls.
    history = controller.get_epoch_history(scope, stream)
    current = history[-1]
    slices = partitions_of(scope, stream) if partitions_of is not None else None
    store = controller.store
    windows = [float(w) for w in store.rate_config.windows]
    described = []
    for seg in current.ranges(scope, stream):
        entry: dict[str, Any] = {
            "segment_id": seg.segment_id,
            "name": seg.name,
            "number": seg.number,
            "epoch": seg.creation_epoch,
            "key_start": seg.key_start,
            "key_end": seg.key_end,
            "container": store.container_id_of(seg.name),
            "partitions": None if slices is None else [p for p, (lo, _) in enumerate(slices) if seg.contains(lo)],
            "length": None, "storage_length": None, "start_offset": None, "sealed": None,
            "rates": [],
        }
        try:
            si = store.get_info(seg.name)
            rates = store.segment_rates(seg.name)
        except SegmentNotFoundError:
            pass  # a stream being created or deleted: show the range without store facts
        else:
            entry.update(length=si.length, start_offset=si.start_offset, sealed=si.sealed,
                         storage_length=si.storage_length)
            entry["rates"] = [
                {"window_s": w, "events_per_s": ev, "bytes_per_s": by, "kib_per_s": by / 1024, "warm": rates.warm(i)}
                for i, (w, ev, by) in enumerate(zip(rates.windows, rates.events_per_s, rates.bytes_per_s,
                                                    strict=True))
            ]
        described.append(entry)
    cfg = info.config
    pending = info.pending_scale
    return {
        "scope": scope,
        "stream": stream,
        "state": info.state.name.lower(),
        "epoch": current.epoch,
        "created_ms": info.created_ms,
        "config": {
            "initial_segments": cfg.initial_segments,
            "scaling": {"type": cfg.scaling.type.name.lower(), "target_rate": cfg.scaling.target_rate,
                        "scale_factor": cfg.scaling.scale_factor, "min_segments": cfg.scaling.min_segments},
            "retention": {"type": cfg.retention.type.name.lower(), "value": cfg.retention.value},
        },
        "truncation": {str(k): v for k, v in info.truncation.items()},
        "partition_count": None if slices is None else len(slices),
        "rate_windows": windows,
        "segments": described,
        "history": _history(scope, stream, history),
        "pending_scale": None if pending is None else {
            "epoch": pending.epoch, "reason": pending.reason, "created_ms": pending.created_ms,
            "sealed_ids": list(pending.sealed),
            "created": [_range(scope, stream, sid, lo, hi) for sid, lo, hi in pending.successors],
        },
    }


def _range(scope: str, stream: str, sid: int, lo: float | None, hi: float | None) -> dict[str, Any]:
    return {"segment_id": sid, "name": segment_name(scope, stream, sid), "key_start": lo, "key_end": hi}


def _history(scope: str, stream: str, history: list[EpochRecord]) -> list[dict[str, Any]]:
    """Each epoch with what its scale sealed (ranges from the epoch before) and created."""
    out = []
    previous: dict[int, tuple[float, float]] = {}
    for epoch in history:
        ranges = {sid: (lo, hi) for sid, lo, hi in epoch.segments}
        sealed = epoch.sealed_ids
        created = epoch.created_ids
        out.append({
            "epoch": epoch.epoch,
            "created_ms": epoch.created_ms,
            "reason": epoch.reason,
            "sealed_ids": sealed,
            "created_ids": created,
            "sealed": [_range(scope, stream, sid, *previous.get(sid, (None, None))) for sid in sealed],
            "created": [_range(scope, stream, sid, *ranges[sid]) for sid in created],
        })
        previous = ranges
    return out


def stream_configuration(request: m.StreamConfigRequest) -> StreamConfiguration:
    scaling, retention = request.scaling, request.retention
    try:
        config = StreamConfiguration(
            initial_segments=request.initial_segments,
            scaling=ScalingPolicy(ScalingType[scaling.type.upper()], scaling.target_rate, scaling.scale_factor,
                                  scaling.min_segments),
            retention=RetentionPolicy(RetentionType[retention.type.upper()], retention.value),
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
    controller: Controller, pool: ThreadPoolExecutor, scaler: StreamScaling, partitions_of: PartitionsOf | None = None,
    delete_stream: Callable[[str, str], None] | None = None,
) -> Handlers:
    """``scaler`` performs manual splits and merges (for Kafka topics it also moves the partition
    writers, so it is the gateway's, not the bare controller's). ``partitions_of(scope, stream)``
    gives a Kafka topic's partition slices (None for other streams), for descriptions.
    ``delete_stream(scope, stream)`` deletes a sealed stream (blocking); the gateway's also drops the
    partitions event writers gave it (default: the controller's alone)."""
    def blocking(request: type[_Req], fn: Callable[[_Req], object]) -> tuple[Command, Handler]:
        return serve(request, on_pool(pool, lambda r, _payload: fn(r)))

    c = controller
    delete = delete_stream if delete_stream is not None else c.delete_stream

    def describe(scope: str, stream: str) -> dict[str, Any]:
        return describe_stream(c, scope, stream, partitions_of)

    def create(r: m.CreateStream) -> dict[str, Any]:
        c.create_stream(r.scope, r.stream, stream_configuration(r))
        return describe(r.scope, r.stream)

    def split(r: m.SplitSegment) -> dict[str, Any]:
        scaler.split(r.scope, r.stream, r.segment, r.pieces, None if r.at is None else list(r.at))
        return describe(r.scope, r.stream)

    def merge(r: m.MergeSegments) -> dict[str, Any]:
        scaler.merge(r.scope, r.stream, list(r.segments))
        return describe(r.scope, r.stream)

    return handlers(
        blocking(m.CreateScope, lambda r: m.CreatedReply(created=c.create_scope(r.scope))),
        blocking(m.DeleteScope, lambda r: c.delete_scope(r.scope)),
        blocking(m.ListScopes, lambda r: m.ScopesReply(scopes=tuple(c.list_scopes()))),
        blocking(m.CreateStream, create),
        blocking(m.UpdateStream, lambda r: m.VersionReply(version=c.update_stream(
            r.scope, r.stream, stream_configuration(r), r.expected_version))),
        blocking(m.DescribeStream, lambda r: describe(r.scope, r.stream)),
        blocking(m.ListStreams, lambda r: m.StreamsReply(streams=tuple(c.list_streams(r.scope)))),
        blocking(m.GetSegmentForKey, lambda r: _segment(c.get_segment_for_key(r.scope, r.stream, r.key))),
        blocking(m.SealStream, lambda r: c.seal_stream(r.scope, r.stream)),
        blocking(m.DeleteStream, lambda r: delete(r.scope, r.stream)),
        blocking(m.TruncateStream, lambda r: c.truncate_stream(r.scope, r.stream, _cut(r.cut))),
        blocking(m.SplitSegment, split),
        blocking(m.MergeSegments, merge),
    )


def _cut(cut: dict[str, int]) -> dict[int | str, int]:
    """A stream cut by segment name (JSON keys are strings; the controller reads one as a name)."""
    return {name: offset for name, offset in cut.items()}


def _segment(seg: SegmentRange) -> m.SegmentRangeReply:
    return m.SegmentRangeReply(segment_id=seg.segment_id, name=seg.name, key_start=seg.key_start,
                               key_end=seg.key_end)
