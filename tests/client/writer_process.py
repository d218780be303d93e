"""A writer in its own process, for the crash tests: writes ``key:number`` events round-robin over
keys and prints ``acked key:number`` as each becomes durable, until killed or ``count`` are written.

    python -m tests.client.writer_process URI TOPIC WRITER_ID FIRST_NUMBER COUNT
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future

from millrace import EventPosition, StreamManager, StringSerializer

KEYS = [f"k{n}" for n in range(8)]


def main(uri: str, topic: str, writer_id: str, first: int, count: int) -> None:
    printing = threading.Lock()

    def acked(value: str) -> object:
        def done(fut: Future[EventPosition]) -> None:
            if fut.exception() is None:
                with printing:
                    print(f"acked {value}", flush=True)
        return done

    with StreamManager(uri) as sm, sm.create_writer("kafka", topic, StringSerializer(), writer_id=writer_id) as w:
        print("opened", flush=True)
        for number in range(first, first + count):
            value = f"{KEYS[number % len(KEYS)]}:{number}"
            w.write_event(value, routing_key=KEYS[number % len(KEYS)]).add_done_callback(acked(value))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
