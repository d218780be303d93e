"""Fixtures shared by every test package."""

import os

from tests.s3server import s3_server  # noqa: F401  (re-exported: pytest finds fixtures by name)

# Every server the tests start (and every process those start) refuses to wait for a store future on its
# reactor thread: such a wait would stall it, or deadlock it (streams.futures.check_reactor_waits).
os.environ.setdefault("MILLRACE_CHECK_REACTOR_WAITS", "1")
