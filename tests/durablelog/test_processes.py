"""Cross-process behaviour: fencing a second owner, and surviving SIGKILL with every ack intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from millrace.store.durablelog.interface import LogAddress
from tests.durablelog.helpers import open_log, payload_for, read_payloads

REPO_ROOT = str(Path(__file__).resolve().parents[2])

OPENER = """
import sys
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.errors import DataLogWriterFencedError
log = FileDurableDataLog(sys.argv[1])
try:
    log.open()
except DataLogWriterFencedError:
    print("fenced", flush=True)
    sys.exit(3)
print("epoch", log.epoch, flush=True)
log.close()
"""

# Appends from 4 threads; prints "sequence worker index" for each entry only after its future completed.
APPENDER = """
import os, sys, threading
from millrace.store.durablelog.local import FileDurableDataLog
from tests.durablelog.helpers import payload_for
log = FileDurableDataLog(sys.argv[1], max_file_bytes=int(sys.argv[2]))
log.open()
def ack(worker, index):
    def done(future):
        os.write(1, f"{future.result().sequence} {worker} {index}\\n".encode())
    return done
def run(worker):
    index = 0
    while True:
        futures = []
        for _ in range(worker + 1):  # workers pipeline 1..4 appends at a time
            f = log.append(payload_for(worker, index))
            f.add_done_callback(ack(worker, index))
            futures.append(f)
            index += 1
        for f in futures:
            f.result()
os.write(1, b"ready\\n")
for w in range(4):
    threading.Thread(target=run, args=(w,), daemon=True).start()
threading.Event().wait()
"""


def run_python(code: str, *args: str, **kwargs: object) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO_ROOT, env=env, **kwargs)  # type: ignore[call-overload]


def test_second_owner_in_another_process_is_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(b"owned").result(timeout=10)
    child = run_python(OPENER, str(tmp_path), stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 3 and out.strip() == b"fenced"
    # the fenced attempt neither bumped the epoch nor disturbed the owner
    assert log.append(b"still-mine").result(timeout=10) == LogAddress(2)
    log.close()
    child = run_python(OPENER, str(tmp_path), stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out.strip() == b"epoch 2"


def test_lock_is_released_when_owner_process_dies(tmp_path: Path) -> None:
    holder = run_python(APPENDER, str(tmp_path), str(1 << 20), stdout=subprocess.PIPE)
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"ready\n"
    child = run_python(OPENER, str(tmp_path), stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=60)
    assert out.strip() == b"fenced"
    holder.kill()
    holder.communicate(timeout=60)
    assert read_payloads(tmp_path) is not None  # a new owner opens (and recovers) once the holder is gone


@pytest.mark.slow
@pytest.mark.parametrize("max_file_bytes", [1 << 20, 4096])
def test_sigkill_loses_no_acknowledged_entry(tmp_path: Path, max_file_bytes: int) -> None:
    child = run_python(APPENDER, str(tmp_path), str(max_file_bytes), stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    lines: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(lines) < 3000 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line)
    os.kill(child.pid, signal.SIGKILL)
    rest, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert len(lines) >= 3000, "child stopped acknowledging"
    # Each ack line was written (with one os.write, so whole) after its future completed.
    lines.extend(rest.splitlines())
    acks = [tuple(map(int, line.split())) for line in lines if line.strip()]

    entries = read_payloads(tmp_path, max_file_bytes=max_file_bytes)
    sequences = [s for s, _ in entries]
    assert sequences == list(range(1, len(entries) + 1))
    by_sequence = dict(entries)
    for sequence, worker, index in acks:
        assert by_sequence[sequence] == payload_for(worker, index)
    assert len(entries) >= len(acks)
    # Per worker, indices appear in order and without holes up to the last acked one.
    last_index: dict[int, int] = {}
    for _, payload in entries:
        worker, index = (int(x) for x in payload.split(b":")[:2])
        assert index == last_index.get(worker, -1) + 1
        last_index[worker] = index
    log = open_log(tmp_path, max_file_bytes=max_file_bytes)
    assert log.append(b"after-crash").result(timeout=10) == LogAddress(len(entries) + 1)
    log.close()
