"""A configuration map and a lease shared by several members through a ``StateSynchronizer``.

    python examples/state_synchronizer.py tcp://127.0.0.1:9090

Two members (in real life two processes; here two synchronizers) update one map. Each update is a
function of the state, written only if nobody wrote meanwhile; otherwise the member reads what it
missed and calls the function again, so no update is lost.
"""

from __future__ import annotations

import sys
from typing import Any

from millrace import StreamManager, Updates

Config = dict[str, Any]


def apply_setting(config: Config, update: list[Any]) -> Config:
    """An update is ["set", key, value] or ["del", key]; every member applies it the same way."""
    if update[0] == "set":
        config[update[1]] = update[2]
    else:
        config.pop(update[1], None)
    return config


def main(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("tutorial")
        a = sm.create_synchronizer("tutorial", "service-config", initial={"replicas": 1},
                                   apply_update=apply_setting)
        b = sm.create_synchronizer("tutorial", "service-config", apply_update=apply_setting)

        # A whole new state...
        a.update(lambda config: {**config, "replicas": config["replicas"] + 1})
        # ...computed again by b, whose copy is behind a's write: refused once, retried on the newer state.
        b.update(lambda config: {**config, "replicas": config["replicas"] * 10})
        print(f"b retried {b.conflicts} time(s)")
        # Or a list of updates, applied by every member.
        b.update(lambda config: Updates([["set", "log_level", "debug"], ["del", "obsolete"]]))

        # A lease: whoever finds it free takes it; the result says who won.
        def take(me: str) -> Any:
            return lambda config: (({**config, "leader": me}, True) if "leader" not in config
                                   else (config, False))
        print("a leads:", a.update_with_result(take("a")), "| b leads:", b.update_with_result(take("b")))

        # Compaction: a snapshot at the tail, history before it truncated; newcomers start there.
        snapshot = a.compact()
        c = sm.create_synchronizer("tutorial", "service-config", apply_update=apply_setting)
        print(f"snapshot at {snapshot}; a newcomer reads revision {c.revision}: {sorted(c.state.items())}")
        b.fetch_updates()
        print("all agree:", a.state == b.state == c.state)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:9090")
