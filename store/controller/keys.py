"""The routing-key hash; it lives in ``millrace.protocol.keys`` so client writers place keys exactly
where the controller does."""

from __future__ import annotations

from millrace.protocol.keys import key_hash

__all__ = ["key_hash"]
