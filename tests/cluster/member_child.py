"""A cluster member in a process of its own, for tests that SIGKILL or SIGSTOP the node holding a session.

``python -m tests.cluster.member_child HOSTS NODE_ID CONTAINERS SESSION_TIMEOUT`` prints ``ready``, then
``start <container> <epoch>`` and ``stop <container>`` as it is told, and runs until killed or until
its stdin closes.
"""

from __future__ import annotations

import logging
import sys
import threading

from millrace.store.cluster.layout import NodeInfo
from millrace.store.cluster.member import ClusterMember, OwnershipTerm, connect


class PrintingHost:
    """Containers start and stop on the member's pool threads: one line at a time, never interleaved."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def say(self, line: str) -> None:
        with self._lock:
            print(line, flush=True)

    def start_container(self, term: OwnershipTerm) -> None:
        self.say(f"start {term.container_id} {term.epoch}")

    def stop_container(self, container_id: int) -> None:
        self.say(f"stop {container_id}")

    def failed_containers(self) -> set[int]:
        return set()  # nothing runs here that could fail


def main() -> None:
    hosts, node_id, containers, session_timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    client = connect(hosts, session_timeout=session_timeout)
    member = ClusterMember(client, NodeInfo(node_id, "127.0.0.1", {"kafka": 0}), containers, PrintingHost(),
                           session_timeout=session_timeout).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    member.close()
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
