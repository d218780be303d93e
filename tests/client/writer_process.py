"""A writer in its own process, for the crash tests: writes ``key:number`` events round-robin over
keys and prints ``acked key:number`` as each becomes durable (``skipped key:number`` for one an earlier
instance of the writer id had written), until killed or ``count`` are written. With ``--numbered`` each
event's number is also its event number, so a restarted writer that writes the same events again skips
those stored already; ``--unkeyed`` writes them without routing keys.

    python -m tests.client.writer_process URI TOPIC WRITER_ID FIRST_NUMBER COUNT [--numbered] [--unkeyed]
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future

from millrace import EventPosition, StreamManager, StringSerializer

KEYS = [f"k{n}" for n in range(8)]


def main(uri: str, topic: str, writer_id: str, first: int, count: int, numbered: bool, unkeyed: bool) -> None:
    printing = threading.Lock()

    def acked(value: str) -> object:
        def done(fut: Future[EventPosition]) -> None:
            if fut.exception() is None:
                word = "skipped" if fut.result().already_written else "acked"
                with printing:
                    print(f"{word} {value}", flush=True)
        return done

    with StreamManager(uri) as sm, sm.create_writer("kafka", topic, StringSerializer(), writer_id=writer_id) as w:
        print("opened", flush=True)
        for number in range(first, first + count):
            key = KEYS[number % len(KEYS)]
            value = f"{key}:{number}"
            w.write_event(value, routing_key=None if unkeyed else key,
                          event_number=number if numbered else None).add_done_callback(acked(value))


if __name__ == "__main__":
    flags = set(sys.argv[6:])
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), "--numbered" in flags,
         "--unkeyed" in flags)
