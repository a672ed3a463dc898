"""Gate 1 streams: row expectations per shard, uniqueness across shards on hashes."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aigc.config import CuratedGateThresholds, PrepareConfig, RawDropConfig
from aigc.lake import open_lake
from aigc.lake.keys import join
from aigc.prepare.run import MANIFEST
from aigc.quality.curated import validate_curated
from aigc.quality.gate import GateFailed
from aigc.workloads.image import IMAGE, prepare_image
from aigc.workloads.image.rawdrop import make_raw_drop
from tests.training_fixtures import rewrite_recorded

DATE = "2026-11-28"
CFG = PrepareConfig(workers=1, shard_target_bytes=64 * 1024, row_group_rows=32)  # several small shards


def test_a_duplicate_split_across_shards_fails_the_gate_and_each_shard_is_its_own_table(tmp_path):
    lake = open_lake(str(tmp_path))
    make_raw_drop(lake.sub("raw/shapes"), DATE, RawDropConfig(n=400, seed=4, dirt_rate=0.0))
    run = prepare_image(lake.sub("raw/shapes"), lake, DATE, CFG)["run_id"]
    prefix = f"curated/shapes/dt={DATE}/run={run}"
    shards = [s["key"] for s in lake.get_json(join(prefix, MANIFEST))["shards"]]
    assert len(shards) >= 3
    thresholds = CuratedGateThresholds(min_rows=100)
    passed = validate_curated(lake, "shapes", DATE, run, thresholds, CFG, IMAGE.records(None))
    assert [t for t in passed["tables"] if t.startswith("rows.")] == [f"rows.part-{i:05d}" for i in range(len(shards))]

    # The last shard's first row takes the first shard's first id: each shard alone is still unique.
    first_id = pq.read_table(lake.open_input(shards[0]), columns=["id"])["id"][0].as_py()
    last = pq.read_table(lake.open_input(shards[-1]))
    ids = last["id"].to_pylist()
    last = last.set_column(last.schema.get_field_index("id"), "id", pa.array([first_id, *ids[1:]]))
    buf = io.BytesIO()
    pq.write_table(last, buf)
    rewrite_recorded(lake, join(prefix, MANIFEST), shards[-1], buf.getvalue())
    with pytest.raises(GateFailed) as failed:
        validate_curated(lake, "shapes", DATE, run, thresholds, CFG, IMAGE.records(None))
    assert len(failed.value.failures) == 1 and "partition: expect_column_values_to_be_between(column=" \
        "'duplicate_ids'" in failed.value.failures[0]
    # The Data Docs, rendered once at the end of the gate, still hold a page for every table's validation.
    docs = [k for k in lake.list(f"quality/curated/dt={DATE}/run={run}/data_docs/validations") if k.endswith(".html")]
    pages = {k.split("/validations/curated/", 1)[1].split("/__none__/")[0].replace("/", ".") for k in docs}
    assert pages == set(passed["tables"]), (pages, docs[:3])
