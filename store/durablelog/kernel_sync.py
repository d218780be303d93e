"""fdatasync handed to the kernel: Linux AIO's IOCB_CMD_FDSYNC, completions signalled on an eventfd.

A durable log that syncs on the event loop's thread blocks the loop for the whole sync (about 90 us
here, tens of ms on a busy disk), and one that syncs on its own thread pays two thread crossings per
commit for the interpreter lock. Submitted this way, the sync runs in the kernel's workers while the loop
goes on reading requests; the loop learns of its end when the eventfd turns readable, and several logs'
syncs run at once with no thread of ours waiting in them. Seastar (Redpanda) and ScyllaDB sync the same
way.

The system calls (``io_setup``, ``io_submit``, ``io_getevents``, ``io_destroy``) are called through
``ctypes``: their ABI is fixed, and the Python bindings of libaio and liburing need native libraries
this project does not otherwise install. Where the kernel refuses them (no AIO, or a sandbox forbidding
it) ``KernelSyncs.open`` returns None and logs sync as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import threading
from collections.abc import Callable

# x86_64 and aarch64 system call numbers; other machines sync without AIO.
_SYSCALLS = {"x86_64": (206, 207, 209, 208), "aarch64": (0, 1, 2, 4)}
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1
_MAX_IN_FLIGHT = 256  # per context; a submit beyond it fails (EAGAIN) and the log syncs by itself
# syscall(2) reads its arguments as longs: an int passed to it must not leave the upper half undefined.
_ONE = ctypes.c_long(1)
_BATCH = ctypes.c_long(64)  # events taken per io_getevents


class _Iocb(ctypes.Structure):
    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_int32),
                ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16),
                ("aio_fildes", ctypes.c_uint32), ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64), ("aio_flags", ctypes.c_uint32),
                ("aio_resfd", ctypes.c_uint32)]


class _Event(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


# What a finished sync calls: with None, or the OSError the sync failed with.
SyncDone = Callable[[OSError | None], None]


class KernelSyncs:
    """An AIO context and its eventfd. ``submit`` from any thread; ``reap`` runs the finished syncs'
    callbacks on the calling thread (the loop's, when ``fileno()`` turns readable). A server keeps one
    for the life of its process."""

    def __init__(self, syscall: Callable[..., int], numbers: tuple[int, int, int, int], context: int, eventfd: int) -> None:
        self._syscall = syscall
        _, self._destroy, self._submit, self._getevents = numbers
        self._context = ctypes.c_ulong(context)
        self._eventfd = eventfd
        self._lock = threading.Lock()
        self._in_flight: dict[int, tuple[_Iocb, SyncDone]] = {}
        self._next_token = 1
        self._events = (_Event * _BATCH.value)()
        self._no_wait = _Timespec(0, 0)
        self.submitted = 0

    @classmethod
    def open(cls) -> KernelSyncs | None:
        """A context, or None where the kernel will not give one."""
        numbers = _SYSCALLS.get(platform.machine())
        if numbers is None or not hasattr(os, "eventfd"):
            return None
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        context = ctypes.c_ulong(0)
        if syscall(numbers[0], ctypes.c_long(_MAX_IN_FLIGHT), ctypes.byref(context)) != 0:
            return None
        eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return cls(syscall, numbers, context.value, eventfd)

    def fileno(self) -> int:
        return self._eventfd

    def submit(self, fd: int, done: SyncDone) -> None:
        """Start an fdatasync of ``fd``; ``done`` runs once it is over. Raises OSError if it cannot start."""
        block = _Iocb()
        block.aio_lio_opcode = _IOCB_CMD_FDSYNC
        block.aio_fildes = fd
        block.aio_flags = _IOCB_FLAG_RESFD
        block.aio_resfd = self._eventfd
        with self._lock:
            token = self._next_token
            self._next_token += 1
            block.aio_data = token
            self._in_flight[token] = (block, done)  # the kernel reads the block until the sync ends
            pointers = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(block))
            if self._syscall(self._submit, self._context, _ONE, pointers) != 1:
                del self._in_flight[token]
                code = ctypes.get_errno() or errno.EIO
                raise OSError(code, f"io_submit: {os.strerror(code)}")
            self.submitted += 1

    def reap(self, wait: bool = False) -> int:
        """Run the callbacks of the syncs that are over (with ``wait``, wait for at least one if any is
        in flight); how many ran."""
        with self._lock:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._eventfd)
            if not self._in_flight:
                return 0
            finished: list[tuple[SyncDone, int]] = []
            events = self._events
            least = 1 if wait else 0
            while self._in_flight:
                count = self._syscall(self._getevents, self._context, ctypes.c_long(least), _BATCH, events,
                                      None if least else ctypes.byref(self._no_wait))
                if count < 0:
                    code = ctypes.get_errno()
                    if code == errno.EINTR:
                        continue
                    raise OSError(code, f"io_getevents: {os.strerror(code)}")
                finished.extend((self._in_flight.pop(events[i].data)[1], events[i].res) for i in range(count))
                if count < _BATCH.value:
                    break  # the eventfd was read first: a sync ending from here on makes it readable again
                least = 0
        for done, result in finished:
            done(None if result >= 0 else OSError(-result, f"fdatasync: {os.strerror(-result)}"))
        return len(finished)

    def close(self) -> None:
        """Wait out every sync in flight, then release the context."""
        while self._in_flight:
            self.reap(wait=True)
        self._syscall(self._destroy, self._context)
        os.close(self._eventfd)
