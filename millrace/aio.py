"""``millrace.aio``: the asyncio API of the native client (``millrace.client.aio`` holds it).

A module, not a link like the folders beside it: a linked file would load twice, as ``millrace.aio`` and
``millrace.client.aio``, with two of each class, so ``isinstance`` would fail across the two names.
"""

from millrace.client import aio as _aio
from millrace.client.aio import *  # noqa: F403 - exactly its __all__

__all__ = _aio.__all__
