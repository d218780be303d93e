"""Kafka's record compression codecs (pure, no I/O), shared by the Kafka codec and the native client.

Both sides meet the same bytes: the gateway stores a producer's batch as sent (compressed or not)
and decompresses only off the hot path; a native reader decompresses what it reads. ``codec`` is a
batch's attributes & 0x07: 0 none, 1 gzip, 2 snappy (raw or Java's xerial framing), 3 lz4 (Kafka's
frame format), 4 zstd (frames without a content size, as zstd-jni writes them).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import Any

import cramjam
import lz4.frame
import zstandard

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # SnappyOutputStream's default block size
_I32 = struct.Struct(">i")


class CompressionError(ValueError):
    """Bytes that the codec cannot decompress, or a codec that does not exist."""


class UnknownCodecError(CompressionError):
    pass


def _snappy_decompress(data: Any) -> bytes:
    mv = memoryview(data)
    if bytes(mv[:8]) != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(mv))
    # xerial framing (Java client): 16-byte header then [int32 length][raw snappy block]...
    pos = 16
    out = bytearray()
    end = len(mv)
    while pos < end:
        if pos + 4 > end:
            raise CompressionError("truncated xerial snappy block length")
        (n,) = _I32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CompressionError("truncated xerial snappy block")
        out += cramjam.snappy.decompress_raw(mv[pos : pos + n])
        pos += n
    return bytes(out)


def _snappy_compress(data: Any) -> bytes:
    mv = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    for i in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK]))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _zstd_decompress(data: Any) -> bytes:
    # Java's zstd-jni streams frames without a content size, so use a streaming reader
    with zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True) as r:
        return r.read()


def decompress(codec: int, data: Any) -> bytes:
    """Decompress a batch's records section."""
    try:
        if codec == GZIP:
            return gzip.decompress(bytes(data))
        if codec == SNAPPY:
            return _snappy_decompress(data)
        if codec == LZ4:
            return lz4.frame.decompress(bytes(data))
        if codec == ZSTD:
            return _zstd_decompress(data)
        if codec == NONE:
            return bytes(data)
    except CompressionError:
        raise
    except (OSError, EOFError, RuntimeError, ValueError, zlib.error, zstandard.ZstdError) as e:
        raise CompressionError(f"cannot decompress {CODEC_NAMES[codec]} records: {e}") from None
    raise UnknownCodecError(f"unknown compression type {codec}")


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress a records section the way the Java client does for each codec; ``level`` as Kafka's
    ``compression.<codec>.level`` (None: Kafka's default, gzip 6, lz4 9, zstd 3; snappy has none)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6 if level is None or level == -1 else level, mtime=0)
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        # Kafka's LZ4 stream: 64 KiB independent blocks, no content size
        return lz4.frame.compress(
            data, compression_level=9 if level is None else level, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False, content_checksum=False, store_size=False
        )
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise UnknownCodecError(f"unknown compression type {codec}")
