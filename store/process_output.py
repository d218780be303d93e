"""The lines a Millrace process prints for whoever started it: ``millrace: kafka listening on H:P``,
``millrace: ready ...``, ``millrace: stopped cleanly``. Tests, ``millrace cluster`` and scripts read
ports and readiness from them.

Each line goes out in one write. With ``PYTHONUNBUFFERED`` set (this machine's environment has it, and
``millrace cluster`` sets it for its children), ``print`` hands its text and its newline to the pipe as
two writes. A log record that another thread writes to stderr, often the same pipe, between the two
then lands inside the line: a test once read port 434412026 from ``...:43441`` followed by a log
record's ``2026-11-28 ...``.
"""

from __future__ import annotations

import sys


def print_line(line: str) -> None:
    """``line`` and its newline to stdout in one write, flushed at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
