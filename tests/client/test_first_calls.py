"""Issue 11's first-calls snippet, run exactly as written (only the server's port differs: tests
listen on free ports)."""

from __future__ import annotations

from tests.server_process import ServerProcess

SNIPPET = '''
from millrace import StreamManager
sm = StreamManager("tcp://127.0.0.1:9090")              # the native listener
sm.create_scope("iot")
sm.create_stream("iot", "readings", initial_segments=2)
writer = sm.create_writer("iot", "readings")
writer.write_event(b"21.5", routing_key="sensor-7").result()   # a future; .result() = durable
writer.flush(); writer.close()
group = sm.create_reader_group("dashboard", "iot", "readings")   # from the head of the stream
reader = group.create_reader("reader-1")
event = reader.read_next_event(timeout=5.0)              # None on timeout
assert event.data == b"21.5"
txw = sm.create_transaction_writer("iot", "readings", writer_id="loader-1")
txn = txw.begin_txn(); txn.write_event(b"22.0", routing_key="sensor-7"); txn.commit()
table = sm.create_key_value_table("iot", "devices")
v1 = table.put("sensor-7", b"online")                    # returns the new version
table.put("sensor-7", b"offline", if_version=v1)         # conditional; a stale version raises
value, version = table.get("sensor-7")
'''


def test_the_first_calls_run_as_written(tmp_path) -> None:
    with ServerProcess(str(tmp_path / "data")) as server:
        code = SNIPPET.replace("tcp://127.0.0.1:9090", f"tcp://127.0.0.1:{server.native_port}")
        names: dict[str, object] = {}
        exec(compile(code, "first_calls", "exec"), names)  # noqa: S102 - the snippet is this file's own text
        # What the snippet did is there: the committed transaction's event follows the first one.
        later = names["reader"].read_next_event(timeout=5.0)  # type: ignore[attr-defined]
        assert later is not None and later.data == b"22.0" and later.routing_key == "sensor-7"
        assert names["value"] == b"offline" and names["version"] != names["v1"]
        names["sm"].close()  # type: ignore[attr-defined]
