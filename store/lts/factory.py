"""Long-term storage from a URL: a filesystem path, ``file:///path`` or ``s3://bucket/prefix``."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.lts.interface import ChunkStorage


def chunk_storage_from_url(url: str, s3_endpoint: str | None = None) -> ChunkStorage:
    """Open the chunk storage ``url`` names.

    ``s3_endpoint`` points the S3 backend at an S3-compatible server (SeaweedFS, MinIO); without it
    boto3 uses AWS, or ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` if set. Credentials and region
    come from the standard boto3 chain.
    """
    if not url:
        raise ValueError("empty long-term storage URL")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"S3 URL needs a bucket: {url!r} (expected s3://BUCKET/PREFIX)")
        if parts.query or parts.fragment:
            # '#' is legal in chunk names but an unescaped one here is almost surely a typo.
            raise ValueError(f"S3 URL must not have a query or fragment: {url!r}")
        from millrace.store.lts.s3 import S3ChunkStorage  # boto3 is slow to import; only pay for it when used

        return S3ChunkStorage(parts.netloc, prefix=unquote(parts.path), endpoint_url=s3_endpoint)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URL must name a local path (file:///path): {url!r}")
        if not parts.path:
            raise ValueError(f"file URL has no path: {url!r}")
        return FileSystemChunkStorage(unquote(parts.path))
    if "://" in url:
        raise ValueError(f"unsupported long-term storage URL scheme {parts.scheme!r} in {url!r}")
    # A plain path, absolute or relative (a Windows drive letter parses as a scheme, hence "://").
    return FileSystemChunkStorage(url)
