"""Rolling Parquet shards: row groups close on rows or bytes, shards roll at a target size."""

import hashlib

import pyarrow as pa

from aigc.prepare.shards import RollingParquetWriter

SCHEMA = pa.schema([("i", pa.int64()), ("blob", pa.binary())])


def test_row_groups_close_on_bytes_before_rows_and_shards_roll(lake):
    writer = RollingParquetWriter(lake, "t", SCHEMA, target_bytes=256 * 1024, row_group_rows=1000,
                                  row_group_bytes=64 * 1024)
    for i in range(100):
        writer.write({"i": i, "blob": bytes([i]) * 10_000})  # 100 × 10 kB: bytes bound first
    shards = writer.close()
    assert len(shards) == 4 and sum(s["rows"] for s in shards) == 100
    for shard in shards:
        pf = lake.parquet_file(shard["key"])
        assert pf.metadata.num_rows == shard["rows"]
        assert all(pf.metadata.row_group(g).num_rows <= 7 for g in range(pf.metadata.num_row_groups))
        data = lake.get_bytes(shard["key"])
        assert shard["bytes"] == len(data) and shard["sha256"] == hashlib.sha256(data).hexdigest()
    values = lake.read_parquet([s["key"] for s in shards], columns=["i"]).column("i").to_pylist()
    assert values == list(range(100))


def test_an_empty_writer_writes_nothing(lake):
    assert RollingParquetWriter(lake, "t", SCHEMA, target_bytes=1 << 20, row_group_rows=10).close() == []
    assert lake.list("t") == []


def test_rows_written_as_columns_make_the_same_shards_as_rows_written_one_by_one(lake):
    rows = [{"i": i, "blob": bytes([i % 256]) * (i * 97 % 9000)} for i in range(300)]
    sizes = {"target_bytes": 256 * 1024, "row_group_rows": 16, "row_group_bytes": 64 * 1024}
    one_by_one = RollingParquetWriter(lake, "a", SCHEMA, **sizes)
    for row in rows:
        one_by_one.write(row)
    by_columns = RollingParquetWriter(lake, "b", SCHEMA, **sizes)
    for start, stop in [(0, 5), (5, 6), (6, 90), (90, 91), (91, 300)]:  # batches across group bounds
        by_columns.write_columns({name: [r[name] for r in rows[start:stop]] for name in SCHEMA.names})
    a, b = one_by_one.close(), by_columns.close()
    assert [(s["rows"], s["sha256"]) for s in a] == [(s["rows"], s["sha256"]) for s in b] and len(a) > 1
