"""A byte stream used as an append-only log file: written, read with seek and readline, truncated,
followed at the tail, and sealed.

    python examples/byte_streams.py tcp://127.0.0.1:9090

A byte stream is a stream of one segment read and written as plain bytes. Offsets are positions in
that segment: they stay valid when the head is truncated away.
"""

from __future__ import annotations

import io
import sys
import threading

from millrace import StreamManager


def main(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("tutorial")
        sm.create_byte_stream("tutorial", "app-log")

        # Writing: write() buffers, appends go out in the background, flush() makes them durable.
        with sm.create_byte_writer("tutorial", "app-log") as writer:
            for n in range(1, 4):
                writer.write(f"entry {n}\n".encode())
            writer.flush()
            print("tail after 3 entries:", writer.fetch_tail_offset())

        # Reading: the reader is a raw file object, so BufferedReader gives readline() and seek().
        log = io.BufferedReader(sm.create_byte_reader("tutorial", "app-log"))
        first = log.readline()
        print("first line:", first.decode().strip(), "| next offset:", log.tell())
        log.seek(-8, io.SEEK_END)
        print("last line:", log.readline().decode().strip())

        # Truncation drops the head; a reader that starts now begins at the new head.
        with sm.create_byte_writer("tutorial", "app-log") as writer:
            writer.truncate_data_before(len(first))
            print("head after truncation:", writer.fetch_head_offset())
        print("a new reader starts with:", io.BufferedReader(
            sm.create_byte_reader("tutorial", "app-log")).readline().decode().strip())

        # Following the tail: a read waits for the next write (or returns None after its timeout).
        idle = sm.create_byte_reader("tutorial", "app-log", timeout=0.2)
        idle.seek(0, io.SEEK_END)
        print("a read at the tail with a 0.2 s timeout:", idle.read(100))
        follower = sm.create_byte_reader("tutorial", "app-log")
        follower.seek(0, io.SEEK_END)
        got: list[bytes] = []
        thread = threading.Thread(target=lambda: got.append(follower.read(100)))
        thread.start()
        writer = sm.create_byte_writer("tutorial", "app-log")
        writer.write(b"entry 4\n")
        writer.flush()
        thread.join()
        print("the follower woke with:", got[0].decode().strip())

        # Sealing: no more writes, and readers reach the end (read() returns everything, then b"").
        writer.seal()
        rest = sm.create_byte_reader("tutorial", "app-log").read()
        print("after sealing, the whole log:", rest.decode().splitlines())

        sm.delete_stream("tutorial", "app-log")  # sealed streams may be deleted


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:9090")
