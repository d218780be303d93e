"""A process holding open transactions, for the crash tests: begins ``count`` transactions on a stream,
writes ``events`` events (``<n>:<i>`` on keys k0..k7) into each, flushes, prints ``open <txn id>`` for
each, then waits to be killed.

    python -m tests.client.txn_process URI SCOPE STREAM LEASE_MS COUNT EVENTS
"""

from __future__ import annotations

import sys
import threading

from millrace import StreamManager, StringSerializer

KEYS = [f"k{n}" for n in range(8)]


def main(uri: str, scope: str, stream: str, lease_ms: int, count: int, events: int) -> None:
    with StreamManager(uri) as sm:
        txw = sm.create_transaction_writer(scope, stream, writer_id="crashing-loader", serializer=StringSerializer(),
                                           lease_ms=lease_ms)
        txns = [txw.begin_txn() for _ in range(count)]
        for n, txn in enumerate(txns):
            for i in range(events):
                txn.write_event(f"{n}:{i}", routing_key=KEYS[i % len(KEYS)])
            txn.flush()
            print(f"open {txn.txn_id}", flush=True)
        threading.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
