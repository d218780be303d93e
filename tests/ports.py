"""Ports for test processes that must be known before they start: a server restarted on the port its
clients know, a replica the others are told of, a ZooKeeper. Picked outside the kernel's ephemeral
range, so nothing that binds port 0 (the servers other tests start beside this one) and no outgoing
connection can be given the port between the check here and the process's own bind: with ports
probed by binding port 0, a full run failed once with EADDRINUSE
(`test_a_range_read_goes_on_across_a_server_restart`)."""

from __future__ import annotations

import random
import socket

_FLOOR = 10_000  # below this sit well-known services' ports


def _range() -> tuple[int, int]:
    """Ports the kernel never hands out by itself here: from ``_FLOOR`` to its ephemeral range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return _FLOOR, max(low, _FLOOR + 1_000)


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports nothing listens on now and the kernel will not give anyone else."""
    low, high = _range()
    rng = random.SystemRandom()
    chosen: list[int] = []
    for _ in range(100 * n):
        port = rng.randrange(low, high)
        if port in chosen:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == n:
            return chosen
    raise RuntimeError(f"no {n} free ports in {low}-{high}")


def free_port() -> int:
    return free_ports(1)[0]
