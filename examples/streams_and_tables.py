"""Scopes, streams, stream cuts and a key-value table with the native client.

    python examples/streams_and_tables.py tcp://127.0.0.1:9090
"""

from __future__ import annotations

import sys

from millrace import (
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    TableKeyVersionMismatchError,
)


def main(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("tutorial")
        config = StreamConfiguration(
            initial_segments=2,
            scaling=ScalingPolicy.by_event_rate(1000, scale_factor=2, min_segments=2),
            retention=RetentionPolicy.by_time(7 * 24 * 3600 * 1000),
        )
        sm.create_stream("tutorial", "orders", config)
        described = sm.describe_stream("tutorial", "orders")
        for state in described.segments:
            seg = state.segment
            print(f"segment {seg.name}: keys [{seg.key_start}, {seg.key_end}), {state.length} bytes")

        # Scale by hand: split the first segment; the history records the epoch.
        first = described.segments[0].segment
        after = sm.split_segment("tutorial", "orders", first)
        print(f"epoch {after.epoch}: {len(after.segments)} segments, last scale: {after.history[-1].reason}")
        print("head:", sm.head_cut("tutorial", "orders"))
        print("tail:", sm.tail_cut("tutorial", "orders"))

        # A key-value table with versions: optimistic concurrency without locks.
        devices = sm.create_key_value_table("tutorial", "devices", partitions=4)
        version = devices.put("sensor-7", b"online")
        devices.put("sensor-7", b"offline", if_version=version)
        try:
            devices.put("sensor-7", b"lost update", if_version=version)
        except TableKeyVersionMismatchError:
            print("a stale version is refused")
        found = devices.get("sensor-7")
        assert found is not None
        print("sensor-7 =", found[0].decode(), "at version", found[1])

        # Keys of one family live together: updated atomically, listed on their own.
        devices.put_all([("temperature", b"21.5"), ("humidity", b"40")], key_family="room-1")
        print("room-1:", {e.key: e.value.decode() for e in devices.entries(key_family="room-1")})

        sm.seal_stream("tutorial", "orders")
        sm.delete_stream("tutorial", "orders")
        sm.delete_key_value_table("tutorial", "devices")
        print("streams left:", sm.list_streams("tutorial"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:9090")
