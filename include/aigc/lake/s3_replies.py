"""How the S3 lake reads a reply it can trust: what a cut one looks like, the attempts that make it again, and the
streams that read and write through those checks instead of pyarrow's own S3 client (``aigc.lake.s3``)."""

from __future__ import annotations

import io
import random
import tempfile
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from botocore.exceptions import ConnectionClosedError, IncompleteReadError, ReadTimeoutError, ResponseStreamingError
from botocore.parsers import ResponseParserError

from aigc.lake.keys import LakeKeyError

if TYPE_CHECKING:
    from aigc.lake.s3 import S3Lake


class LakeRequestFailed(RuntimeError):
    """An S3 request that failed after its retries: the message names the operation, the object and the lake."""


class CutReply(Exception):
    """A reply that cannot be the whole of one: headers it must have are missing (urllib3 only logs headers cut
    part-way), or a body shorter than its own Content-Length. Never trusted: the request is made again."""


# A reply cut off after it began: botocore's retry loop has already returned by then. (botocore's StreamingBody
# turns urllib3's protocol errors and read timeouts into the first four; a cut XML body fails its parser.)
CUT = (ResponseStreamingError, IncompleteReadError, ReadTimeoutError, ConnectionClosedError,
             ResponseParserError, CutReply)


def require(reply: dict, *fields: str) -> dict:
    missing = [f for f in fields if reply.get(f) is None]
    if missing:
        raise CutReply(f"the reply has no {', '.join(missing)} (its headers were cut)")
    return reply



def attempts(lake: S3Lake, operation: str, key: str | None):
    """Attempts at one request, each a context that swallows a cut reply (and sleeps, jittered) until the last,
    which raises LakeRequestFailed naming the operation, the object and what was cut."""

    class Attempt:
        def __init__(self, n: int) -> None:
            self.n = n

        def __enter__(self):
            return self

        def __exit__(self, kind, error, _tb) -> bool:
            # botocore raises ValueError for a header value cut part-way (a timestamp it cannot parse)
            cut = isinstance(error, CUT) or isinstance(error, ValueError) and \
                not isinstance(error, LakeKeyError)
            if error is None or not cut:
                return False
            if self.n == lake.options.max_attempts:
                target = lake.url(key) if key is not None else lake.uri
                raise LakeRequestFailed(f"{operation} {target}: the reply was cut off {self.n} times in a row "
                                        f"({type(error).__name__}: {error}); {lake._what_to_check()}") from error
            time.sleep(min(2.0, 0.05 * 2**self.n) * random.uniform(0.5, 1.5))
            return True

    return (Attempt(n) for n in range(1, lake.options.max_attempts + 1))



class RangeReader(io.RawIOBase):
    """A file over one version of an S3 object, each read a checked, retried ranged GET (``S3Lake.open_input``)."""

    def __init__(self, lake: S3Lake, key: str, size: int, etag: str) -> None:
        super().__init__()
        self.lake, self.key, self.size, self.etag, self.pos = lake, key, size, etag, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = self.lake._read_range(self.key, self.pos, end, self.etag)
        self.pos = end
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class SpooledUpload(io.RawIOBase):
    """A write stream to ``key``: spooled to a temporary file, uploaded whole when closed (``S3Lake.open_output``)."""

    def __init__(self, lake: S3Lake, key: str) -> None:
        super().__init__()
        self.lake, self.key = lake, key
        self.spool = tempfile.TemporaryFile(prefix="aigc-upload-")  # noqa: SIM115 - closed by close()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        n = self.spool.write(data)
        self.size += n
        return n

    def tell(self) -> int:
        return self.size

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.size > self.lake.options.multipart_threshold_bytes:
                self.lake._upload(self.key, self.spool, self.size)
            else:
                self.spool.seek(0)
                self.lake._put(self.key, self.spool.read())
        finally:
            self.spool.close()
            super().close()


class ClosingParquetWriter(pq.ParquetWriter):
    """A ParquetWriter over a stream it was handed, which closing the writer closes too (uploading it)."""

    def __init__(self, sink: pa.NativeFile, schema: pa.Schema, **kwargs) -> None:
        super().__init__(sink, schema, **kwargs)
        self._sink = sink

    def close(self) -> None:
        super().close()
        self._sink.close()


