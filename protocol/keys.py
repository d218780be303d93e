"""The routing-key hash: where a routing key falls in the key space [0.0, 1.0).

Every writer (the native client, the Kafka gateway, clients in other languages) must place a key
exactly where the controller does, so the function is fixed and simple to re-implement:

    h = first 8 bytes of BLAKE2b(utf8(routing_key), digest_size=8), read as an unsigned big-endian int
    key_hash = (h >> 11) / 2**53

Keeping the top 53 bits makes the division exact in IEEE-754 doubles, so the result is the same in
every language and always strictly below 1.0.
"""

from __future__ import annotations

import hashlib

_SCALE = float(1 << 53)


def key_hash(routing_key: str) -> float:
    """Stable hash of ``routing_key`` onto [0.0, 1.0)."""
    return bytes_hash(routing_key.encode("utf-8"))


def bytes_hash(key: bytes) -> float:
    """``key_hash`` of a key given as its bytes (the UTF-8 of a string key)."""
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 11) / _SCALE
