"""A reader of a reader group in its own process (tests/client/test_reader_groups.py).

    python -m tests.client.reader_group_process URI SCOPE GROUP READER_ID OUT_FILE

Prints "ready" once the reader is online, then appends one line per event to OUT_FILE, each with
one ``write`` (the event's key and sequence number with the reader's position after it), the way an
application stores a result together with the position it came from: a SIGKILL loses at most a
torn last line, and its position with it. Runs until killed.
"""

from __future__ import annotations

import json
import os
import sys

from millrace import StreamManager


def main(uri: str, scope: str, group_name: str, reader_id: str, out_path: str) -> None:
    with StreamManager(uri) as sm:
        reader = sm.reader_group(group_name, scope).create_reader(reader_id)
        print("ready", flush=True)
        fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        while True:
            event = reader.read_next_event(timeout=0.5)
            if event is None or event.is_checkpoint:
                continue
            body = json.loads(event.data)
            line = json.dumps({"key": body["key"], "seq": body["seq"], "position": event.position.to_json()})
            os.write(fd, (line + "\n").encode())


if __name__ == "__main__":
    main(*sys.argv[1:6])
