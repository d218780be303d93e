"""Controller commands of the native protocol. Controller calls block on table-segment I/O, so
they run on a worker pool, never on the reactor."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway.native.wire import Command
from store.controller import (
    Controller,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    StreamConfiguration,
)
from store.futures import StoreFuture


def describe_stream(controller: Controller, scope: str, stream: str) -> dict[str, Any]:
    """A stream as the CLI and HTTP API show it: state, configuration and current segments."""
    info = controller.get_stream(scope, stream)
    segments = controller.get_current_segments(scope, stream)
    store = controller.store
    described = []
    for seg in segments:
        entry: dict[str, Any] = {
            "segment_id": seg.segment_id,
            "name": seg.name,
            "number": seg.number,
            "epoch": seg.creation_epoch,
            "key_start": seg.key_start,
            "key_end": seg.key_end,
            "container": store.container_for(seg.name).container_id,
        }
        if store.exists(seg.name):
            si = store.get_info(seg.name)
            entry.update(length=si.length, start_offset=si.start_offset, sealed=si.sealed,
                         storage_length=si.storage_length)
        described.append(entry)
    cfg = info.config
    return {
        "scope": scope,
        "stream": stream,
        "state": info.state.name.lower(),
        "epoch": info.current_epoch,
        "created_ms": info.created_ms,
        "config": {
            "initial_segments": cfg.initial_segments,
            "scaling": {"type": cfg.scaling.type.name.lower(), "target_rate": cfg.scaling.target_rate,
                        "scale_factor": cfg.scaling.scale_factor, "min_segments": cfg.scaling.min_segments},
            "retention": {"type": cfg.retention.type.name.lower(), "value": cfg.retention.value},
        },
        "segments": described,
        "truncation": {str(k): v for k, v in info.truncation.items()},
    }


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


def controller_handlers(
    controller: Controller, pool: ThreadPoolExecutor, scaler: Any
) -> dict[int, Callable[[dict[str, Any], bytes], StoreFuture]]:
    """``scaler`` performs manual splits and merges (for Kafka topics it also moves the partition
    writers, so it is the gateway's, not the bare controller's)."""
    def blocking(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any], bytes], StoreFuture]:
        def run(header: dict[str, Any], _payload: bytes) -> StoreFuture:
            result: StoreFuture = StoreFuture()

            def call() -> None:
                try:
                    result.set_result(fn(header))
                except Exception as exc:  # noqa: BLE001 - becomes an error status for the caller
                    result.set_exception(exc)

            pool.submit(call)
            return result

        return run

    c = controller
    return {
        Command.CREATE_SCOPE: blocking(lambda h: {"created": c.create_scope(h["scope"])}),
        Command.DELETE_SCOPE: blocking(lambda h: c.delete_scope(h["scope"])),
        Command.LIST_SCOPES: blocking(lambda h: {"scopes": c.list_scopes()}),
        Command.CREATE_STREAM: blocking(
            lambda h: (c.create_stream(h["scope"], h["stream"], stream_configuration(h)),
                       describe_stream(c, h["scope"], h["stream"]))[1]
        ),
        Command.DESCRIBE_STREAM: blocking(lambda h: describe_stream(c, h["scope"], h["stream"])),
        Command.LIST_STREAMS: blocking(lambda h: {"streams": c.list_streams(h["scope"])}),
        Command.GET_SEGMENT_FOR_KEY: blocking(lambda h: _segment(c.get_segment_for_key(h["scope"], h["stream"],
                                                                                        h["key"]))),
        Command.SEAL_STREAM: blocking(lambda h: c.seal_stream(h["scope"], h["stream"])),
        Command.DELETE_STREAM: blocking(lambda h: c.delete_stream(h["scope"], h["stream"])),
        Command.TRUNCATE_STREAM: blocking(lambda h: c.truncate_stream(h["scope"], h["stream"], h["cut"])),
        Command.SPLIT_SEGMENT: blocking(lambda h: (
            scaler.split(h["scope"], h["stream"], h["segment"], int(h.get("pieces", 2)), h.get("at")),
            describe_stream(c, h["scope"], h["stream"]))[1]),
        Command.MERGE_SEGMENTS: blocking(lambda h: (
            scaler.merge(h["scope"], h["stream"], h["segments"]), describe_stream(c, h["scope"], h["stream"]))[1]),
    }


def _segment(seg: Any) -> dict[str, Any]:
    return {"segment_id": seg.segment_id, "name": seg.name, "key_start": seg.key_start, "key_end": seg.key_end}
