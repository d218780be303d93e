"""Controller commands of the native protocol. Controller calls block on table-segment I/O, so
they run on a worker pool, never on the reactor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from millrace.protocol.wire import Command
from millrace.store.controller import (
    Controller,
    EpochRecord,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    StreamConfiguration,
    segment_name,
)
from millrace.store.errors import SegmentNotFoundError
from millrace.store.futures import StoreFuture

if TYPE_CHECKING:
    from millrace.streams.scaling import StreamScaling

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


def stream_configuration(header: dict[str, Any]) -> StreamConfiguration:
    scaling = header.get("scaling", {})
    retention = header.get("retention", {})
    config = StreamConfiguration(
        initial_segments=int(header.get("initial_segments", 1)),
        scaling=ScalingPolicy(
            ScalingType[str(scaling.get("type", "fixed_num_segments")).upper()],
            int(scaling.get("target_rate", 0)),
            int(scaling.get("scale_factor", 0)),
            int(scaling.get("min_segments", 1)),
        ),
        retention=RetentionPolicy(RetentionType[str(retention.get("type", "none")).upper()],
                                  int(retention.get("value", 0))),
    )
    config.validate()
    return config


def on_pool(pool: ThreadPoolExecutor,
            fn: Callable[[dict[str, Any], bytes], Any]) -> Callable[[dict[str, Any], bytes], StoreFuture]:
    """A command handler that runs ``fn(header, payload)`` (blocking) on ``pool``; its result or
    exception completes the returned future."""
    def run(header: dict[str, Any], payload: bytes) -> StoreFuture:
        result: StoreFuture = StoreFuture()

        def call() -> None:
            try:
                result.set_result(fn(header, payload))
            except Exception as exc:  # noqa: BLE001 - becomes an error status for the caller
                result.set_exception(exc)

        pool.submit(call)
        return result

    return run


def controller_handlers(
    controller: Controller, pool: ThreadPoolExecutor, scaler: StreamScaling, partitions_of: PartitionsOf | None = None,
    delete_stream: Callable[[str, str], None] | None = None,
) -> dict[int, Callable[[dict[str, Any], bytes], StoreFuture]]:
    """``scaler`` performs manual splits and merges (for Kafka topics it also moves the partition
    writers, so it is the gateway's, not the bare controller's). ``partitions_of(scope, stream)``
    gives a Kafka topic's partition slices (None for other streams), for descriptions.
    ``delete_stream(scope, stream)`` deletes a sealed stream (blocking); the gateway's also drops the
    partitions event writers gave it (default: the controller's alone)."""
    def blocking(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any], bytes], StoreFuture]:
        return on_pool(pool, lambda header, _payload: fn(header))

    c = controller
    delete = delete_stream if delete_stream is not None else c.delete_stream

    def describe(h: dict[str, Any]) -> dict[str, Any]:
        return describe_stream(c, h["scope"], h["stream"], partitions_of)

    return {
        Command.CREATE_SCOPE: blocking(lambda h: {"created": c.create_scope(h["scope"])}),
        Command.DELETE_SCOPE: blocking(lambda h: c.delete_scope(h["scope"])),
        Command.LIST_SCOPES: blocking(lambda h: {"scopes": c.list_scopes()}),
        Command.CREATE_STREAM: blocking(
            lambda h: (c.create_stream(h["scope"], h["stream"], stream_configuration(h)),
                       describe(h))[1]
        ),
        Command.UPDATE_STREAM: blocking(
            lambda h: {"version": c.update_stream(h["scope"], h["stream"], stream_configuration(h),
                                                  h.get("expected_version"))}
        ),
        Command.DESCRIBE_STREAM: blocking(lambda h: describe(h)),
        Command.LIST_STREAMS: blocking(lambda h: {"streams": c.list_streams(h["scope"])}),
        Command.GET_SEGMENT_FOR_KEY: blocking(lambda h: _segment(c.get_segment_for_key(h["scope"], h["stream"],
                                                                                        h["key"]))),
        Command.SEAL_STREAM: blocking(lambda h: c.seal_stream(h["scope"], h["stream"])),
        Command.DELETE_STREAM: blocking(lambda h: delete(h["scope"], h["stream"])),
        Command.TRUNCATE_STREAM: blocking(lambda h: c.truncate_stream(h["scope"], h["stream"], h["cut"])),
        Command.SPLIT_SEGMENT: blocking(lambda h: (
            scaler.split(h["scope"], h["stream"], h["segment"], int(h.get("pieces", 2)), h.get("at")),
            describe(h))[1]),
        Command.MERGE_SEGMENTS: blocking(lambda h: (
            scaler.merge(h["scope"], h["stream"], h["segments"]), describe(h))[1]),
    }


def _segment(seg: Any) -> dict[str, Any]:
    return {"segment_id": seg.segment_id, "name": seg.name, "key_start": seg.key_start, "key_end": seg.key_end}
