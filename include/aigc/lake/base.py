"""The lake interface every stage uses: one class, two backends (local folder, S3).

Backends implement a handful of primitives on validated keys; everything else (JSON,
Parquet, line streaming) is written once here on top of them, so the stages never ask
which backend they run on.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from aigc.lake.keys import join, validate_key
from aigc.lines import DEFAULT_MAX_LINE_BYTES, split_lines


class PreconditionFailed(RuntimeError):
    """A conditional write lost a race: the object changed (or appeared) since it was read."""


class ObjectNotFound(FileNotFoundError):
    """A key that does not exist in the lake."""


class ObjectCorrupt(RuntimeError):
    """An object that is not what its writer recorded (its size or SHA-256 differ), read after every retry."""


class Lake(ABC):
    """A rooted key/object store. Keys are relative to ``uri`` and validated on every call."""

    uri: str

    # -- primitives each backend implements -------------------------------------------
    @abstractmethod
    def _put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        """Store ``data`` whole and atomically; return the new ETag."""

    @abstractmethod
    def _get(self, key: str) -> tuple[bytes, str]:
        """Return (data, ETag); raise ObjectNotFound."""

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _list(self, prefix: str, recursive: bool = True) -> Iterator[str]:
        """Yield keys (relative to the root) under ``prefix``; only its direct objects if not recursive."""

    @abstractmethod
    def _list_versions(self, prefix: str) -> Iterator[tuple[str, int, str]]:
        """Yield (key, size, version) under ``prefix``: the version changes whenever the object's bytes do (S3's
        ETag; a local file's modification time)."""

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _size(self, key: str) -> int: ...

    @property
    @abstractmethod
    def arrow_fs(self) -> pafs.FileSystem:
        """A pyarrow filesystem over the same storage, for streamed Parquet I/O."""

    @abstractmethod
    def arrow_path(self, key: str) -> str:
        """The path of ``key`` inside ``arrow_fs``."""

    # -- small objects ------------------------------------------------------------------
    def put_bytes(self, key: str, data: bytes) -> str:
        return self._put(validate_key(key), data)

    def get_bytes(self, key: str, *, sha256: str | None = None) -> bytes:
        """The object's bytes; with ``sha256`` (what its writer recorded) checked against them: a reply that does
        not match is fetched again (a backend's ``_read_verified``), then ObjectCorrupt."""
        key = validate_key(key)
        return self._read(key) if sha256 is None else self._read_verified(key, sha256)

    def _read_verified(self, key: str, sha256: str) -> bytes:
        data = self._read(key)
        _check_sha256(self, key, data, sha256)
        return data

    def _read(self, key: str) -> bytes:
        """The object's bytes alone: a backend whose ETag costs work (a digest) skips it here."""
        return self._get(key)[0]

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        return self._get(validate_key(key))

    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create ``key`` only if it does not exist; PreconditionFailed otherwise."""
        return self._put(validate_key(key), data, if_none_match=True)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace ``key`` only if its ETag is still ``etag``; PreconditionFailed otherwise."""
        return self._put(validate_key(key), data, if_match=etag)

    def put_json(self, key: str, obj: Any) -> str:
        return self.put_bytes(key, json_bytes(obj))

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def exists(self, key: str) -> bool:
        return self._exists(validate_key(key))

    def size(self, key: str) -> int:
        return self._size(validate_key(key))

    def list(self, prefix: str = "", *, recursive: bool = True) -> list[str]:
        """Every key under ``prefix`` (a folder-like prefix), sorted; ``recursive=False``: no sub-folders."""
        prefix = validate_key(prefix, allow_empty=True)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return sorted(self._list(prefix, recursive))

    def list_versions(self, prefix: str = "") -> list[tuple[str, int, str]]:
        """Every object under ``prefix`` as (key, size, version), sorted by key: what a snapshot of a folder records
        to tell later whether any object in it was replaced, added or removed."""
        prefix = validate_key(prefix, allow_empty=True)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return sorted(self._list_versions(prefix))

    def delete(self, key: str) -> None:
        self._delete(validate_key(key))

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; returns how many were deleted."""
        keys = self.list(validate_key(prefix))
        self._delete_many(keys)
        return len(keys)

    def _delete_many(self, keys: list[str]) -> None:
        for key in keys:
            self._delete(key)

    # -- streams ------------------------------------------------------------------------
    def open_input(self, key: str, size: int | None = None) -> pa.NativeFile:
        """A streamed, seekable reader: large objects are never pulled whole into Python. ``size``: what the
        object's writer recorded (a manifest's); the reader must see exactly that many bytes."""
        key = validate_key(key)
        if not self._exists(key):
            raise ObjectNotFound(f"{self.url(key)} does not exist")
        f = self.arrow_fs.open_input_file(self.arrow_path(key))
        if size is not None and (seen := f.size()) != size:
            f.close()
            raise ObjectCorrupt(f"{self.url(key)} holds {seen} bytes where its writer recorded {size}")
        return f

    def open_output(self, key: str) -> pa.NativeFile:
        """A streamed writer (S3: multipart upload under the hood)."""
        return self.arrow_fs.open_output_stream(self.arrow_path(validate_key(key)))

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of an object from byte ``start`` (a ranged read: the rest is not transferred); fewer
        only where the object ends first."""
        with self.open_input(key) as f:
            f.seek(start)
            return f.read(length)

    def digest(self, key: str, size: int | None = None) -> tuple[str, int]:
        """(SHA-256, length) of an object, streamed: how an audit checks what was stored against its writer's
        record without holding the object."""
        digest, length = hashlib.sha256(), 0
        with self.open_input(key, size) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                length += len(chunk)
        return digest.hexdigest(), length

    def iter_lines(self, key: str, chunk_bytes: int = 1 << 20,
                   max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES) -> Iterator[bytes]:
        """Yield the lines of an object (without the newline), reading it in chunks, in time linear in its size.

        A line longer than ``max_line_bytes`` is yielded as a ``LongLine``: its first ``LongLine.HEAD`` bytes and
        its length; the rest streams past unkept, so a line of any length costs the reader bounded memory."""
        with self.open_input(key) as f:
            yield from split_lines(iter(lambda: f.read(chunk_bytes), b""), max_line_bytes)

    def parquet_writer(self, key: str, schema: pa.Schema, **kwargs: Any) -> pq.ParquetWriter:
        """A Parquet writer that owns its stream: ``close()`` completes the (multipart) upload."""
        kwargs.setdefault("compression", "zstd")
        return pq.ParquetWriter(self.arrow_path(validate_key(key)), schema, filesystem=self.arrow_fs, **kwargs)

    def parquet_file(self, key: str, size: int | None = None) -> pq.ParquetFile:
        """A Parquet object, streamed; ``size`` as for ``open_input``: a manifest's figure, so no reader takes a
        size from a HEAD whose reply was cut."""
        return pq.ParquetFile(self.open_input(key, size))

    def read_parquet(self, keys: list[str | dict], columns: list[str] | None = None) -> pa.Table:
        """Read selected columns of several Parquet objects (column pruning keeps it small): keys, or a manifest's
        shard entries (``{"key", "bytes"}``), whose recorded size the reader must see."""
        tables = [self.parquet_file(k).read(columns=columns) if isinstance(k, str) else
                  self.parquet_file(k["key"], k.get("bytes")).read(columns=columns) for k in keys]
        if not tables:
            raise ObjectNotFound("no Parquet objects to read")
        return pa.concat_tables(tables)

    # -- naming -------------------------------------------------------------------------
    def url(self, key: str = "") -> str:
        """The full URI of ``key``, for messages and for users."""
        return self.uri.rstrip("/") + ("/" + key if key else "")

    def sub(self, prefix: str) -> Lake:
        """A lake rooted at ``prefix`` inside this one (same backend, same credentials)."""
        return self._rooted(join(prefix))

    @abstractmethod
    def _rooted(self, prefix: str) -> Lake: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


def _check_sha256(lake: Lake, key: str, data: bytes, sha256: str) -> None:
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise ObjectCorrupt(f"{lake.url(key)} is not what its writer recorded: {len(data)} bytes with SHA-256 {got}, "
                            f"expected {sha256}")


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()
