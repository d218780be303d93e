"""S3-only properties, against a real SeaweedFS with authentication on."""

from __future__ import annotations

import uuid

import pytest

from millrace.store.errors import ChunkExistsError
from millrace.store.lts.factory import chunk_storage_from_url
from millrace.store.lts.s3 import S3ChunkStorage, S3StorageError
from tests.s3server import S3Server


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex}"


def test_wrong_secret_is_a_clear_error(s3_server: S3Server) -> None:
    bad = S3ChunkStorage(
        s3_server.bucket,
        prefix=_prefix(),
        endpoint_url=s3_server.endpoint_url,
        client=s3_server.client(aws_secret_access_key="not-the-secret"),
    )
    with pytest.raises(S3StorageError, match="denied.*SignatureDoesNotMatch.*access key"):
        bad.write("a/b", b"x")
    with pytest.raises(S3StorageError, match="denied"):
        bad.exists("a/b")  # must not pretend the chunk is absent
    with pytest.raises(S3StorageError, match="denied"):
        bad.list()


def test_unknown_access_key_is_a_clear_error(s3_server: S3Server) -> None:
    bad = S3ChunkStorage(
        s3_server.bucket,
        endpoint_url=s3_server.endpoint_url,
        client=s3_server.client(aws_access_key_id="NOSUCHKEY", aws_secret_access_key="x"),
    )
    with pytest.raises(S3StorageError, match="denied"):
        bad.read("a/b", 0, 1)


def test_credentials_from_environment_via_factory(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var, value in s3_server.env().items():
        monkeypatch.setenv(var, value)
    prefix = _prefix()
    storage = chunk_storage_from_url(f"s3://{s3_server.bucket}/{prefix}", s3_endpoint=s3_server.endpoint_url)
    try:
        storage.write("seg/c", b"hello")
        assert storage.read("seg/c", 1, 3) == b"ell"
        # The prefix is a folder in the bucket; the chunk name follows it.
        raw = s3_server.client().get_object(Bucket=s3_server.bucket, Key=f"{prefix}/seg/c")
        assert raw["Body"].read() == b"hello"
    finally:
        storage.close()


def test_prefixes_isolate_storages(s3_server: S3Server) -> None:
    one = S3ChunkStorage(s3_server.bucket, _prefix(), s3_server.endpoint_url, client=s3_server.client())
    two = S3ChunkStorage(s3_server.bucket, _prefix(), s3_server.endpoint_url, client=s3_server.client())
    one.write("c", b"1")
    two.write("c", b"2")
    assert one.list() == ["c"] and two.list() == ["c"]
    assert one.read("c", 0, 1) == b"1" and two.read("c", 0, 1) == b"2"


def test_retried_write_of_same_bytes_is_not_a_conflict(s3_server: S3Server) -> None:
    # Models botocore retrying a put whose first attempt landed but whose response was lost.
    storage = S3ChunkStorage(s3_server.bucket, _prefix(), s3_server.endpoint_url, client=s3_server.client())
    storage.write("c", b"same bytes")
    storage.write("c", b"same bytes")
    with pytest.raises(ChunkExistsError):
        storage.write("c", b"different")
    with pytest.raises(ChunkExistsError):
        storage.write("c", b"same bytez")  # same length, different content


def test_missing_bucket_is_a_clear_error(s3_server: S3Server) -> None:
    storage = S3ChunkStorage(
        "no-such-bucket-" + uuid.uuid4().hex[:8],
        endpoint_url=s3_server.endpoint_url,
        client=s3_server.client(),
    )
    with pytest.raises(S3StorageError, match="NoSuchBucket"):
        storage.list()


def test_unreachable_endpoint_is_a_clear_error() -> None:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    storage = S3ChunkStorage("b", endpoint_url="http://127.0.0.1:9", client=client)
    with pytest.raises(S3StorageError, match="127.0.0.1:9"):
        storage.exists("a")
