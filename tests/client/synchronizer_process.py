"""A synchronizer member in its own process, for the racing tests: adds 1 to the shared counters
``total`` and its own name ``COUNT`` times, each through a conditional ``update``, compacting every
``COMPACT_EVERY`` updates (0: never), then prints ``done <conflicts>``.

    python -m tests.client.synchronizer_process URI SCOPE NAME MEMBER COUNT COMPACT_EVERY state|updates GO

``state``: each update returns the whole new map; ``updates``: it returns ``Updates`` of increments
applied by every member's ``apply_update``. The member starts once the file ``GO`` names exists, so all
of them race from the first update.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from millrace import StreamManager, Updates

Counters = dict[str, int]


def add(state: Counters, update: Any) -> Counters:
    """An update is [key, amount]."""
    key, amount = update
    state[key] = state.get(key, 0) + amount
    return state


def main(uri: str, scope: str, name: str, member: str, count: int, compact_every: int, mode: str,
         go: str) -> None:
    with StreamManager(uri) as sm, \
            sm.create_synchronizer(scope, name, initial={"total": 0}, apply_update=add) as sync:
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.01)
        for n in range(1, count + 1):
            if mode == "state":
                sync.update(lambda s: {**s, "total": s["total"] + 1, member: s.get(member, 0) + 1})
            else:
                sync.update(lambda s: Updates([["total", 1], [member, 1]]))
            if compact_every and n % compact_every == 0:
                sync.compact()
        print(f"done {sync.conflicts}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7],
         sys.argv[8])
