"""The lake on S3 or any S3-compatible server (MinIO, moto's server in tests)."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import urlparse

import boto3
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from boto3.exceptions import S3UploadFailedError as S3TransferFailed
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)

from aigc.lake.base import Lake, ObjectCorrupt, ObjectNotFound, PreconditionFailed, _check_sha256
from aigc.lake.keys import join, validate_key
from aigc.lake.s3_replies import (
    ClosingParquetWriter,
    CutReply,
    LakeRequestFailed,
    RangeReader,
    SpooledUpload,
    attempts,
    require,
)


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3 endpoint. Defaults come from the standard AWS variables."""

    endpoint_url: str | None = None
    """e.g. ``http://127.0.0.1:9000`` for MinIO; None means AWS itself."""
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)  # never in a repr, so never in a log or traceback
    session_token: str | None = field(default=None, repr=False)
    role_arn: str | None = None
    """A role to assume with the credentials above (or the default chain's): the lake then holds temporary
    credentials that it renews itself before they expire (AssumeRole at the endpoint's STS: AWS, MinIO), so a task
    that outlives one session (training runs for hours) keeps working, and no expiring secret is handed on."""
    credentials_uri: str | None = None
    """A parent process's loopback endpoint serving its role credentials (aigc.lake.credentials): a torchrun worker's
    lake fetches them there, and again before they expire, instead of holding long-lived keys."""
    credentials_token: str | None = field(default=None, repr=False)
    role_session_seconds: int = 3600
    region: str = "us-east-1"
    max_attempts: int = 6
    """Bounded retries; botocore's 'standard' mode backs off exponentially with jitter."""
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    multipart_threshold_bytes: int = 16 * 1024 * 1024
    """Objects larger than this are uploaded in parts (boto3 and pyarrow alike)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 20:
            raise ValueError(f"max_attempts must be in [1, 20], got {self.max_attempts}")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ValueError("S3 timeouts must be positive")
        if not 900 <= self.role_session_seconds <= 43_200:
            raise ValueError(f"role_session_seconds must be in [900, 43200] (STS's limits), got "
                             f"{self.role_session_seconds}")
        if self.multipart_threshold_bytes < 5 * 1024 * 1024:
            raise ValueError(
                f"multipart_threshold_bytes must be ≥ 5 MiB (S3's smallest part), got {self.multipart_threshold_bytes}"
            )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> S3Options:
        env = os.environ if env is None else env
        return cls(
            endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            role_arn=env.get("AIGC_S3_ROLE_ARN") or None,
            credentials_uri=env.get("AIGC_S3_CREDENTIALS_URI") or None,
            credentials_token=env.get("AIGC_S3_CREDENTIALS_TOKEN") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        )


class LakeUnreachable(ConnectionError):
    """The S3 lake could not be reached or refused the credentials: the message says where to set them."""


_UNREACHABLE = (NoCredentialsError, PartialCredentialsError, EndpointConnectionError, ConnectTimeoutError)
_REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "NoSuchBucket", "InvalidToken",
            "ExpiredToken", "InvalidBucketName"}


def _unreachable(lake: S3Lake, error: Exception) -> LakeUnreachable | None:
    """botocore's bare 'Unable to locate credentials' (and the like) as a message naming the lake, the
    endpoint, and the variables or connection that set them; None for any other error."""
    refused = isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") in _REFUSED
    return LakeUnreachable(lake.explain(error)) if refused or isinstance(error, _UNREACHABLE) else None


def _failed(lake: S3Lake, error: Exception, key: str | None) -> Exception:
    if unreachable := _unreachable(lake, error):
        return unreachable
    if not isinstance(error, ClientError):
        return error
    operation = getattr(error, "operation_name", "request")
    target = lake.url(key) if key is not None else lake.uri
    return LakeRequestFailed(f"{operation} {target} failed: {error}; {lake._what_to_check()}")


def _explained(method):
    @functools.wraps(method)
    def wrapper(self: S3Lake, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (ClientError, *_UNREACHABLE) as e:
            raise _failed(self, e, args[0] if args and isinstance(args[0], str) else None) from e
    return wrapper


def _assumed_role_session(o: S3Options) -> boto3.session.Session:
    """A boto3 session whose credentials are ``o.role_arn``'s, assumed with ``o``'s keys (or the default chain's),
    or those a parent serves at ``o.credentials_uri``; renewed by botocore before they expire (its advisory window:
    15 minutes ahead)."""
    from botocore.credentials import RefreshableCredentials
    from botocore.session import get_session

    if o.credentials_uri:
        from aigc.lake.credentials import fetch

        def refresh() -> dict:
            return fetch(o.credentials_uri, o.credentials_token or "")
    else:
        refresh = _assume_role(o)
    botocore_session = get_session()
    botocore_session._credentials = RefreshableCredentials.create_from_metadata(refresh(), refresh, "assume-role")
    return boto3.session.Session(botocore_session=botocore_session, region_name=o.region)


def _assume_role(o: S3Options) -> Callable[[], dict]:
    """A function that assumes ``o.role_arn`` at the endpoint's STS and returns the credentials as botocore wants."""
    sts = boto3.session.Session().client("sts", endpoint_url=o.endpoint_url, region_name=o.region,
                                         aws_access_key_id=o.access_key, aws_secret_access_key=o.secret_key,
                                         aws_session_token=o.session_token)

    def assume() -> dict:
        c = sts.assume_role(RoleArn=o.role_arn, RoleSessionName="aigc-lake",
                            DurationSeconds=o.role_session_seconds)["Credentials"]
        return {"access_key": c["AccessKeyId"], "secret_key": c["SecretAccessKey"], "token": c["SessionToken"],
                "expiry_time": c["Expiration"].isoformat()}

    return assume


class S3Lake(Lake):
    def __init__(self, uri: str, options: S3Options | None = None):
        parsed = urlparse(uri)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"an S3 lake URI looks like s3://bucket/prefix, got {uri!r}")
        self.bucket = parsed.netloc
        self.prefix = join(parsed.path) if parsed.path.strip("/") else ""
        self.uri = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.options = options or S3Options.from_env()

    def explain(self, error: Exception) -> str:
        endpoint = self.options.endpoint_url or "AWS S3 itself (no endpoint is set)"
        return (f"cannot use the lake {self.uri} at {endpoint}: {type(error).__name__}: {error}. The CLI reads the "
                "endpoint and credentials from AWS_ENDPOINT_URL (MinIO or another S3-compatible server, e.g. "
                "http://127.0.0.1:9000), AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; Airflow tasks read the "
                "aws_default connection (login, password, extra.endpoint_url), e.g. AIRFLOW_CONN_AWS_DEFAULT="
                '\'{"conn_type": "aws", "login": "…", "password": "…", "extra": {"endpoint_url": '
                '"http://127.0.0.1:9000"}}\'. The bucket must exist.')

    def _what_to_check(self) -> str:
        endpoint = self.options.endpoint_url or "AWS S3 itself"
        return (f"the lake is {self.uri} at {endpoint}: check that the endpoint is up, the credentials "
                f"are accepted and the bucket {self.bucket!r} exists")

    def __getstate__(self) -> dict:
        # Clients and connection pools do not cross process boundaries: rebuild them lazily.
        return {k: v for k, v in self.__dict__.items() if k not in ("client", "_arrow_fs", "_role_session")}

    def _k(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @cached_property
    def _role_session(self) -> boto3.session.Session:
        return _assumed_role_session(self.options)

    @cached_property
    def client(self):
        o = self.options
        config = Config(
            retries={"max_attempts": o.max_attempts, "mode": "standard"},
            connect_timeout=o.connect_timeout_s,
            read_timeout=o.read_timeout_s,
            s3={"addressing_style": "path"} if o.endpoint_url else None,
        )
        if o.role_arn or o.credentials_uri:
            return self._role_session.client("s3", endpoint_url=o.endpoint_url, region_name=o.region, config=config)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=o.endpoint_url,
            aws_access_key_id=o.access_key,
            aws_secret_access_key=o.secret_key,
            aws_session_token=o.session_token,
            region_name=o.region,
            config=config,
        )

    @_explained
    def _put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        extra = {}
        if if_none_match:
            extra["IfNoneMatch"] = "*"
        if if_match is not None:
            extra["IfMatch"] = if_match
        if not extra and len(data) > self.options.multipart_threshold_bytes:
            return self._upload(key, io.BytesIO(data), len(data))
        for attempt in attempts(self, "PutObject", key):
            with attempt:
                try:
                    return require(self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data, **extra),
                                    "ETag")["ETag"]
                except ClientError as e:
                    if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
                        raise PreconditionFailed(f"conditional write to {self.url(key)} lost a race: {e}") from None
                    raise
                except CutReply:
                    if extra:  # it may have landed: the caller's compare-and-swap tells its own write from a rival's
                        raise PreconditionFailed(f"conditional write to {self.url(key)}: its reply was cut, so it "
                                                 "may or may not have landed") from None
                    raise  # an unconditional PUT is simply made again

    @_explained
    def _get_once(self, key: str) -> tuple[bytes, str]:
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self._k(key))
        except ClientError as e:
            if e.response["Error"]["Code"] in ("NoSuchKey", "404"):
                raise ObjectNotFound(f"{self.url(key)} does not exist") from None
            raise
        require(obj, "ContentLength", "ETag")  # without them a short body would pass for the whole object
        body = obj["Body"].read()
        if len(body) != obj["ContentLength"]:
            raise CutReply(f"{len(body)} bytes of the {obj['ContentLength']} its headers announced")
        return body, obj["ETag"]

    def _get(self, key: str) -> tuple[bytes, str]:
        """GET with the body read inside the retry: botocore retries the request, not a body cut
        mid-way (a reset connection, a short read) nor a reply whose headers were cut, so such a
        reply is fetched again, with backoff."""
        for attempt in attempts(self, "GetObject", key):
            with attempt:
                return self._get_once(key)
        raise AssertionError("unreachable")

    def _head(self, key: str) -> dict | None:
        """HEAD, whose reply must carry the object's size and ETag: a reply whose headers were cut is asked again,
        never read as a size of 0."""
        for attempt in attempts(self, "HeadObject", key):
            with attempt:
                head = self._head_once(key)
                return head if head is None else require(head, "ContentLength", "ETag")
        raise AssertionError("unreachable")

    def _upload(self, key: str, f, size: int) -> str:
        """A large object from the file ``f`` in parts (boto3's transfer manager retries each part), the whole
        upload made again if it fails or if the object it leaves is not ``size`` bytes (a cut reply to the
        completion); returns the stored ETag."""
        transfer = TransferConfig(multipart_threshold=self.options.multipart_threshold_bytes)
        for attempt in attempts(self, "multipart upload", key):
            with attempt:
                f.seek(0)
                try:
                    self.client.upload_fileobj(f, self.bucket, self._k(key), Config=transfer)
                except (BotoCoreError, S3TransferFailed) as e:
                    raise CutReply(f"the upload failed: {type(e).__name__}: {e}") from e
                head = self._head(key)
                if head is None or head["ContentLength"] != size:
                    raise CutReply(f"the completed upload holds {head and head['ContentLength']} bytes, not {size}")
                return head["ETag"]
        raise AssertionError("unreachable")

    def open_output(self, key: str) -> pa.NativeFile:
        """A writer that spools to a local temporary file and uploads on close, with our retries (a PUT, or parts
        past ``multipart_threshold_bytes``): pyarrow's own S3 stream fails the whole write when one reply to its
        multipart completion is cut."""
        return pa.PythonFile(SpooledUpload(self, validate_key(key)), mode="w")

    def parquet_writer(self, key: str, schema: pa.Schema, **kwargs) -> pq.ParquetWriter:
        kwargs.setdefault("compression", "zstd")
        return ClosingParquetWriter(self.open_output(key), schema, **kwargs)

    def _read_range(self, key: str, start: int, end: int, etag: str) -> bytes:
        """Bytes [start, end) of the version ``etag`` of ``key``: exactly that many, or fetched again."""
        for attempt in attempts(self, "GetObject (range)", key):
            with attempt:
                obj = self._get_range_once(key, start, end, etag)
                body = obj["Body"].read()
                if len(body) != end - start:
                    raise CutReply(f"{len(body)} bytes of the {end - start} asked for")
                return body
        raise AssertionError("unreachable")

    @_explained
    def _get_range_once(self, key: str, start: int, end: int, etag: str) -> dict:
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self._k(key), Range=f"bytes={start}-{end - 1}",
                                         IfMatch=etag)
        except ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                raise ObjectCorrupt(f"{self.url(key)} was replaced while it was being read (its ETag is no longer "
                                    f"{etag}): read it again from the start") from None
            raise
        return require(obj, "ContentLength", "ETag")

    def _read_verified(self, key: str, sha256: str) -> bytes:
        """A GET checked against the writer's SHA-256: a reply that differs (cut in a way nothing else caught) is
        fetched again like any cut reply; bytes that keep differing are ObjectCorrupt."""
        for attempt in range(1, self.options.max_attempts + 1):
            data = self._read(key)
            if hashlib.sha256(data).hexdigest() == sha256 or attempt == self.options.max_attempts:
                _check_sha256(self, key, data, sha256)
                return data
            time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    def open_input(self, key: str, size: int | None = None) -> pa.NativeFile:
        """A seekable reader that makes every read a ranged GET checked like any other: its reply must carry the
        range's length and the ETag the reader opened (one version of the object, whatever is written meanwhile),
        and a cut one is fetched again. pyarrow's own S3 reader is not used for reads: it takes the size from a
        HEAD whose reply, cut inside its headers, reads as 0 bytes ("Parquet file size is 0 bytes"), and passes
        a body cut part-way to the Parquet decoder. ``size``: the writer's record (a manifest's), which the
        object must match; else our checked HEAD's."""
        key = validate_key(key)
        head = self._head(key)
        if head is None:
            raise ObjectNotFound(f"{self.url(key)} does not exist")
        if size is not None and head["ContentLength"] != size:
            raise ObjectCorrupt(f"{self.url(key)} holds {head['ContentLength']} bytes where its writer recorded "
                                f"{size}")
        return pa.PythonFile(RangeReader(self, key, head["ContentLength"], head["ETag"]), mode="r")

    @_explained
    def _head_once(self, key: str) -> dict | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._k(key))
        except ClientError as e:
            if e.response["Error"]["Code"] in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    def _exists(self, key: str) -> bool:
        return self._head(key) is not None

    def _size(self, key: str) -> int:
        head = self._head(key)
        if head is None:
            raise ObjectNotFound(f"{self.url(key)} does not exist")
        return head["ContentLength"]

    def _list(self, prefix: str, recursive: bool = True) -> Iterator[str]:
        return iter([key for key, _size, _etag in self._listing(prefix, recursive)])

    def _list_versions(self, prefix: str) -> Iterator[tuple[str, int, str]]:
        return iter(self._listing(prefix, recursive=True))

    def _listing(self, prefix: str, recursive: bool) -> list[tuple[str, int, str]]:
        """Every page, or none: a page whose reply was cut (no ``IsTruncated``: an empty listing is not the same as
        a lost one) starts the listing again."""
        strip = len(self.prefix) + 1 if self.prefix else 0
        paginator = self.client.get_paginator("list_objects_v2")
        extra = {} if recursive else {"Delimiter": "/"}
        for attempt in attempts(self, "ListObjectsV2", prefix):
            with attempt:
                try:
                    return [(obj["Key"][strip:], obj["Size"], obj["ETag"])
                            for page in paginator.paginate(Bucket=self.bucket, Prefix=self._k(prefix), **extra)
                            for obj in require(page, "IsTruncated").get("Contents", [])]
                except (ClientError, *_UNREACHABLE) as e:
                    raise _failed(self, e, prefix) from e
        raise AssertionError("unreachable")

    @_explained
    def _delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._k(key))

    @_explained
    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix)
        for i in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": self._k(k)} for k in keys[i : i + 1000]]
            for attempt in attempts(self, "DeleteObjects", prefix):  # deleting again is harmless
                with attempt:
                    self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
                    break
        return len(keys)

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        """pyarrow's S3 client, with the boto3 client's current credentials: rebuilt when an assumed role's
        credentials were renewed (each stream opened takes the renewed ones)."""
        o = self.options
        if o.role_arn or o.credentials_uri:
            frozen = self._role_session.get_credentials().get_frozen_credentials()  # renews them if near expiry
            keys = (frozen.access_key, frozen.secret_key, frozen.token)
        else:
            keys = (o.access_key, o.secret_key, o.session_token)
        cached = self.__dict__.get("_arrow_fs")
        if cached is None or cached[0] != keys:
            self.__dict__["_arrow_fs"] = (keys, self._new_arrow_fs(*keys))
        return self.__dict__["_arrow_fs"][1]

    def _new_arrow_fs(self, access_key: str | None, secret_key: str | None,
                      session_token: str | None) -> pafs.FileSystem:
        o = self.options
        kwargs = {}
        if o.endpoint_url:
            # pyarrow ignores AWS_ENDPOINT_URL (see AIRFLOW_NOTES): pass it explicitly.
            parsed = urlparse(o.endpoint_url)
            kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
        return pafs.S3FileSystem(
            access_key=access_key,
            secret_key=secret_key,
            session_token=session_token,
            region=o.region,
            connect_timeout=o.connect_timeout_s,
            request_timeout=o.read_timeout_s,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=o.max_attempts),
            **kwargs,
        )

    def arrow_path(self, key: str) -> str:
        return f"{self.bucket}/{self._k(key)}"

    def _rooted(self, prefix: str) -> Lake:
        sub = S3Lake(f"s3://{self.bucket}/{self._k(prefix)}", self.options)
        sub.__dict__["client"] = self.client  # share the connection pool
        return sub
