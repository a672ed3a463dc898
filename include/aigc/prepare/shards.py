"""Parquet writers for stage 1: curated shards that roll at a target size, and quarantine."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aigc.lake import Lake
from aigc.lake.keys import join

QUARANTINE_SCHEMA = pa.schema([
    ("id", pa.string()), ("reason", pa.string()), ("detail", pa.string()),
    ("raw_file", pa.string()), ("raw_line", pa.int64()), ("raw", pa.binary()),
    ("attachment_key", pa.string()), ("attachment", pa.binary()),
])


class RollingParquetWriter:
    """Buffers rows into row groups and starts a new ``part-NNNNN.parquet`` past a target size."""

    def __init__(self, lake: Lake, prefix: str, schema: pa.Schema, *, target_bytes: int, row_group_rows: int,
                 row_group_bytes: int = 8 * 1024 * 1024):
        self.lake, self.prefix, self.schema = lake, prefix, schema
        self.target_bytes, self.row_group_rows, self.row_group_bytes = target_bytes, row_group_rows, row_group_bytes
        self._buffered_bytes = 0
        self._columns: dict[str, list] = {name: [] for name in schema.names}  # columnar: cheap to convert
        self._buffered = 0
        self._writer = None
        self._sink = None
        self._shard_bytes = 0
        self.shards: list[dict] = []

    def write(self, row: dict) -> None:
        """Buffer one row: a dict with (at least) every column of the schema."""
        for name, column in self._columns.items():
            value = row[name]
            column.append(value)
            if isinstance(value, bytes | str):
                self._buffered_bytes += len(value)
        self._buffered += 1
        # A row group closes on rows or on bytes, whichever first: 2048 large images (or
        # quarantined bombs) must not sit in memory waiting for their row count.
        if self._buffered >= self.row_group_rows or self._buffered_bytes >= self.row_group_bytes:
            self._flush()

    def write_columns(self, columns: dict[str, list]) -> None:
        """Buffer rows given as columns (equal-length lists), without a Python step per value.

        Row groups close exactly where ``write`` would close them row by row, so the shards do
        not depend on how the rows arrived.
        """
        sizes = self._row_bytes(columns)  # (rows,) what `write` counts: len() of every str and bytes value
        start = 0
        while start < len(sizes):
            room = min(self.row_group_rows - self._buffered, len(sizes) - start)
            filled = self._buffered_bytes + np.cumsum(sizes[start : start + room])  # (room,)
            # Up to the row limit, or through the first row that reaches the byte limit.
            take = min(room, int(np.searchsorted(filled, self.row_group_bytes)) + 1)
            for name, column in self._columns.items():
                column.extend(columns[name][start : start + take])
            self._buffered += take
            self._buffered_bytes = int(filled[take - 1])
            start += take
            if self._buffered >= self.row_group_rows or self._buffered_bytes >= self.row_group_bytes:
                self._flush()

    def _row_bytes(self, columns: dict[str, list]) -> np.ndarray:
        sizes = np.zeros(len(columns[self.schema.names[0]]), dtype=np.int64)
        for field in self.schema:
            if pa.types.is_string(field.type) or pa.types.is_binary(field.type):
                sizes += np.fromiter((len(v) if v is not None else 0 for v in columns[field.name]),
                                     dtype=np.int64, count=len(sizes))
        return sizes

    def _flush(self) -> None:
        if not self._buffered:
            return
        table = pa.Table.from_pydict(self._columns, schema=self.schema)
        self._columns = {name: [] for name in self.schema.names}
        self._buffered = self._buffered_bytes = 0
        if self._writer is None:
            key = join(self.prefix, f"part-{len(self.shards):05d}.parquet")
            self._sink = HashingSink(self.lake.open_output(key))
            self._writer = pq.ParquetWriter(self._sink, self.schema, compression="zstd")
            self.shards.append({"key": key, "rows": 0})
        self._writer.write_table(table, row_group_size=table.num_rows)
        self.shards[-1]["rows"] += table.num_rows
        self._shard_bytes += table.nbytes  # uncompressed: images are PNG, so close to the file size
        if self._shard_bytes >= self.target_bytes:
            self._close_shard()

    def _close_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            shard = self.shards[-1]
            shard["bytes"] = self._sink.size
            shard["sha256"] = self._sink.digest.hexdigest()
        self._writer, self._sink, self._shard_bytes = None, None, 0

    def close(self) -> list[dict]:
        self._flush()
        self._close_shard()
        return self.shards


class HashingSink:
    """A write-only file that hashes what passes through: shard checksums without a re-read."""

    def __init__(self, sink: pa.NativeFile):
        self._sink = sink
        self.digest = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self._sink.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        if not self.closed:
            self._sink.close()
            self.closed = True
