"""The native Python client: a peer of the server that shares only ``millrace.protocol`` with it.

Units: ``connection`` (pipelined connections, reconnecting pool), ``controller`` (the controller's
commands, typed), ``streams`` (configurations, descriptions, stream cuts), ``manager``
(``StreamManager``), ``segments`` (raw segment access for tools and tests), ``synchronizer``
(``StateSynchronizer``, a state shared through conditional appends), ``batch`` (``BatchClient``, a
stream's history between two cuts as segment ranges read in parallel) and ``reader_group``
(``ReaderGroup``, ``EventStreamReader``: readers sharing streams' segments through a synchronizer). A
reader group's state as data and pure updates (``protocol/reader_group_state.py``) and the
synchronizer's entries (``protocol/synchronizer.py``) live in ``millrace.protocol``: the server reads
them too, to show reader groups.
"""

from millrace.client.reader_group import TruncatedDataError
from millrace.client.synchronizer import (
    StateCorruptError,
    StateNotInitializedError,
    StateSynchronizer,
    Updates,
)

__all__ = ["StateCorruptError", "StateNotInitializedError", "StateSynchronizer", "TruncatedDataError", "Updates"]
