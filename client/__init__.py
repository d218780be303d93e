"""The native Python client: a peer of the server that shares only ``millrace.protocol`` with it.

Units: ``connection`` (pipelined connections, reconnecting pool), ``controller`` (the controller's
commands, typed), ``streams`` (configurations, descriptions, stream cuts), ``manager``
(``StreamManager``), ``segments`` (raw segment access for tools and tests), ``synchronizer``
(``StateSynchronizer``, a state shared through conditional appends), ``batch`` (``BatchClient``, a
stream's history between two cuts as segment ranges read in parallel).
"""

from millrace.client.synchronizer import (
    StateCorruptError,
    StateNotInitializedError,
    StateSynchronizer,
    Updates,
)

__all__ = ["StateCorruptError", "StateNotInitializedError", "StateSynchronizer", "Updates"]
