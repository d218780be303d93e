"""How much of a file the kernel's page cache holds, for tests of what the store leaves cached."""

from __future__ import annotations

import ctypes
import mmap
import os


def resident_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of ``path`` in the page cache (mincore(2) over a private mapping of the file)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    if size == 0:
        return 0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
        start = ctypes.c_char.from_buffer(mapped)
        try:
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del start  # the mapping cannot close while ctypes holds it
    return sum(mmap.PAGESIZE for page in vector if page & 1)
