"""A process's announcement lines (ports, readiness) reach a pipe whole while its other threads log to
stderr on the same pipe, as ``tests/server_process.py`` and ``millrace cluster`` read them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.server_process import REPO_ROOT

LINES = 20_000

# A child that announces ports while a thread logs as fast as it can, unbuffered (PYTHONUNBUFFERED, as
# this machine's environment and ``millrace cluster``'s children have it).
CHILD = f"""
import logging, threading
from millrace.store.process_output import print_line
logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
done = threading.Event()
def log_until_done():
    while not done.is_set():
        logging.getLogger("noise").warning("a record between the lines")
threading.Thread(target=log_until_done, daemon=True).start()
for i in range({LINES}):
    print_line(f"millrace: kafka listening on 127.0.0.1:{{40000 + i % 20000}}")
done.set()
"""


def test_announced_lines_stay_whole_beside_a_thread_logging_to_stderr() -> None:
    """``print(..., flush=True)`` in this child let 2026-... log records into the middle of its lines
    (a test once read port 434412026); every line must come out whole."""
    done = subprocess.run([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    announced = [line for line in done.stdout.splitlines() if line.startswith("millrace:")]
    torn = [line for line in announced if not re.fullmatch(r"millrace: kafka listening on 127\.0\.0\.1:\d{5}", line)]
    assert torn == []
    assert len(announced) == LINES
