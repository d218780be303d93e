"""S3 long-term storage via boto3: one object per chunk under ``s3://bucket/prefix/``.

Write-once relies on conditional creation (``PutObject`` with ``If-None-Match: *``), which AWS S3,
SeaweedFS (verified by the tests, including racing writers), MinIO and Ceph RGW honour: of several
writers of one name exactly one succeeds, the rest get 412 Precondition Failed. A server that
ignored the header would let a later writer overwrite silently, so this backend needs one that
honours it; there is deliberately no head-then-put fallback, whose check-then-act race would let a
zombie container overwrite a chunk a newer owner wrote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from millrace.store.errors import ChunkExistsError, ChunkNotFoundError, StoreError
from millrace.store.fsutil import Buffer
from millrace.store.lts.filesystem import validate_chunk_name
from millrace.store.lts.interface import ChunkStorage

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_AUTH_CODES = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "403",
    "Forbidden",
}


class S3StorageError(StoreError):
    """S3 refused or failed a request for a reason other than a missing or existing chunk."""


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _status(e: ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def default_config() -> Config:
    """Retries and timeouts for chunk traffic: a few retries with backoff, no hanging forever."""
    return Config(
        retries={"max_attempts": 5, "mode": "standard"},
        connect_timeout=5,
        read_timeout=60,  # generous: a chunk of tens of MiB on a slow link
        max_pool_connections=32,  # several storage-writer threads share one client
    )


class S3ChunkStorage(ChunkStorage):
    """Chunks as S3 objects; credentials come from the standard boto3 chain (env, config, role)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise ValueError("S3 bucket name must not be empty")
        self.bucket = bucket
        # "a", "a/" and "/a/" all mean the folder a/; keys are prefix + chunk name.
        stripped = prefix.strip("/")
        self.prefix = f"{stripped}/" if stripped else ""
        self.endpoint_url = endpoint_url
        self._owns_client = client is None
        if client is None:
            config = default_config()
            if endpoint_url is not None:
                # S3-compatible servers on an address rarely resolve bucket.host names.
                config = config.merge(Config(s3={"addressing_style": "path"}))
            client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint_url, region_name=region, config=config
            )
        self.client = client

    def __repr__(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3ChunkStorage(s3://{self.bucket}/{self.prefix}{where})"

    def _key(self, name: str) -> str:
        validate_chunk_name(name)
        return self.prefix + name

    def _error(self, op: str, name: str, e: Exception) -> S3StorageError:
        where = f"s3://{self.bucket}/{self.prefix}{name}" + (
            f" at {self.endpoint_url}" if self.endpoint_url else ""
        )
        if isinstance(e, NoCredentialsError):
            return S3StorageError(
                f"S3 {op} {where}: no AWS credentials found "
                "(set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or an AWS profile)"
            )
        if isinstance(e, ClientError):
            code = _code(e)
            message = e.response.get("Error", {}).get("Message", "")
            if code in _AUTH_CODES or _status(e) == 403:
                return S3StorageError(
                    f"S3 {op} {where} denied ({code}: {message}); check the access key, secret "
                    "and the identity's permissions on the bucket"
                )
            return S3StorageError(f"S3 {op} {where} failed ({code}: {message})")
        return S3StorageError(f"S3 {op} {where} failed: {e}")

    def write_parts(self, name: str, parts: Sequence[Buffer]) -> None:
        key = self._key(name)
        # botocore signs and checksums one body: the parts are joined (a lone bytes part is not copied).
        data = parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                IfNoneMatch="*",
            )
            return
        except ClientError as e:
            # 409 ConditionalRequestConflict: AWS's answer while a racing conditional write is in
            # flight; whoever it was, the chunk is then taken.
            if _status(e) not in (412, 409):
                raise self._error("write", name, e) from e
        except BotoCoreError as e:
            raise self._error("write", name, e) from e
        if self._holds(key, data):
            # Our own earlier attempt landed but its response was lost and botocore retried:
            # the chunk holds exactly our bytes, so the write succeeded.
            return
        raise ChunkExistsError(f"chunk already exists: {name}")

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether object ``key`` exists with exactly ``data`` as its content."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
            if head["ContentLength"] != len(data):
                return False
            if head.get("ETag", "").strip('"') == hashlib.md5(data, usedforsecurity=False).hexdigest():
                return True
            # ETags of encrypted or multipart objects are not MD5s: compare the bytes themselves.
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            return body == data
        except ClientError as e:
            if _code(e) in _NOT_FOUND:
                return False
            raise self._error("write", key[len(self.prefix) :], e) from e

    def read(self, name: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"offset and length must be >= 0, got offset={offset} length={length}")
        key = self._key(name)
        if length == 0:
            if not self.exists(name):
                raise ChunkNotFoundError(f"no such chunk: {name}")
            return b""
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}"
            )
            return response["Body"].read()
        except ClientError as e:
            if _code(e) in _NOT_FOUND:
                raise ChunkNotFoundError(f"no such chunk: {name}") from None
            if _code(e) == "InvalidRange" or _status(e) == 416:
                # The range starts at or past the end of an existing object (or it is empty).
                return b""
            raise self._error("read", name, e) from e
        except BotoCoreError as e:
            raise self._error("read", name, e) from e

    def delete(self, name: str) -> None:
        key = self._key(name)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)  # S3 deletes are idempotent
        except ClientError as e:
            if _code(e) in _NOT_FOUND:
                return
            raise self._error("delete", name, e) from e
        except BotoCoreError as e:
            raise self._error("delete", name, e) from e

    def exists(self, name: str) -> bool:
        key = self._key(name)
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except ClientError as e:
            # A 403 is not "absent": answering False there would let callers act on a lie.
            if _code(e) in _NOT_FOUND:
                return False
            raise self._error("exists", name, e) from e
        except BotoCoreError as e:
            raise self._error("exists", name, e) from e

    def list(self, prefix: str = "") -> list[str]:
        names: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                for obj in page.get("Contents", ()):
                    names.append(obj["Key"][len(self.prefix) :])
        except ClientError as e:
            raise self._error("list", prefix, e) from e
        except BotoCoreError as e:
            raise self._error("list", prefix, e) from e
        names.sort()
        return names

    def close(self) -> None:
        if self._owns_client:
            self.client.close()
