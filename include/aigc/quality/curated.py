"""Gate 1 (prepare → train): the expectations a curated partition must meet to be published.

The gate recounts the run's Parquet files itself rather than trusting the manifest, so
reconciliation (input = curated + Σ quarantined) is checked against what is really stored.
It streams: the row expectations run on one shard at a time (a table per shard, each shard read
once, payload columns never), and uniqueness across shards is checked afterwards on 8-byte hashes
of the ids and content hashes, so memory is a shard plus 16 bytes a row, whatever the partition's size.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd

from aigc.config import CuratedGateThresholds, PrepareConfig
from aigc.config.form import how_to_set
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.prepare.run import MANIFEST
from aigc.quality.gate import Table, run_gate
from aigc.workload import RecordRules

GATE = "curated"


def validate_curated(
    lake: Lake, dataset: str, date: str | dt.date, run_id: str,
    thresholds: CuratedGateThresholds, prepare_cfg: PrepareConfig, rules: RecordRules,
) -> dict:
    """Run gate 1 on a prepared (not yet published) run by a workload's record ``rules``; GateFailed if it does not
    pass. The core's expectations (schema, rows, unique ids and content,
    quarantine, reconciliation) hold for every workload; the rules add their own on the rows."""
    import great_expectations.expectations as gxe

    schema_of = rules.curated_schema
    columns = [f.name for f in schema_of if f.name not in rules.payload_columns]  # payload is not needed to judge
    curated_run = run_prefix(partition("curated", dataset, date), run_id)
    manifest = lake.get_json(join(curated_run, MANIFEST))
    shard_keys = [s["key"] for s in manifest["shards"]]
    size_of = {s["key"]: s.get("bytes") for s in (*manifest["shards"], *manifest["quarantine"]["shards"])}

    def row_expectations() -> list:  # fresh objects per shard: an expectation belongs to one suite
        return [
            *[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in ("id", "content_hash", "source", "created_at")],
            gxe.ExpectColumnValuesToBeUnique(column="id"),
            gxe.ExpectColumnValuesToBeUnique(column="content_hash"),
            *rules.expectations(prepare_cfg),
        ]

    # Each shard is read once, when its table's turn comes (run_gate calls the loader), and dropped after; its
    # ids and content hashes stay behind as 8-byte hashes for the partition table, which is validated last.
    n_rows = sum(lake.parquet_file(k, size_of[k]).metadata.num_rows for k in shard_keys)  # footers: no data read
    id_hashes, content_hashes = [], []

    def load_shard(key: str) -> pd.DataFrame:
        frame = lake.parquet_file(key, size_of[key]).read(columns=columns).to_pandas()
        id_hashes.append(pd.util.hash_pandas_object(frame["id"], index=False).to_numpy())
        content_hashes.append(pd.util.hash_pandas_object(frame["content_hash"], index=False).to_numpy())
        return frame

    shard_tables = [Table(f"rows.{key.rsplit('/', 1)[-1].removesuffix('.parquet')}",
                          lambda key=key: load_shard(key), row_expectations()) for key in shard_keys]

    def partition_rows() -> pd.DataFrame:
        return pd.DataFrame([{"rows": n_rows, "duplicate_ids": _repeats(id_hashes),
                              "duplicate_content": _repeats(content_hashes)}])
    schema = pd.DataFrame(
        [{"shard": k, "column": f.name, "type": _type_name(f.type), "expected": _type_name(schema_of.field(f.name).type)
          if f.name in schema_of.names else "<not in schema>"}
         for k in shard_keys for f in lake.parquet_file(k, size_of[k]).schema_arrow]
    )
    quarantined_rows = sum(lake.parquet_file(s["key"], s.get("bytes")).metadata.num_rows
                           for s in manifest["quarantine"]["shards"])
    stored = pd.DataFrame([_stored(lake, s) for s in (*manifest["shards"], *manifest["quarantine"]["shards"])])
    n_input = manifest["input_records"]
    by_reason = pd.DataFrame(
        [{"reason": r, "count": n, "ratio": n / n_input} for r, n in manifest["quarantined"].items()],
        columns=["reason", "count", "ratio"],
    )
    quarantined = int(by_reason["count"].sum())
    totals = pd.DataFrame([{
        "input": n_input,
        "accounted": n_rows + quarantined,
        "manifest_rows": manifest["rows"], "stored_rows": n_rows,
        "manifest_quarantined": quarantined, "stored_quarantined": quarantined_rows,
        "quarantine_ratio": quarantined / n_input if n_input else 0.0,
    }])
    tables = [
        Table("schema", schema, [
            gxe.ExpectColumnPairValuesToBeEqual(column_A="type", column_B="expected"),
            gxe.ExpectTableRowCountToEqual(value=len(schema_of) * len(shard_keys)),
        ]),
        *shard_tables,
        Table("stored", stored, [gxe.ExpectColumnValuesToBeInSet(column="matches_manifest", value_set=[True])],
              explain={"matches_manifest": "a shard's stored bytes are not what its writer recorded (SHA-256): it "
                                           "was changed or cut after it was written. Run stage 1 for the date again"}),
        Table("partition", partition_rows, explain={
            "rows": (
                f"the curated partition has {n_rows} rows, fewer than the minimum {thresholds.min_rows}: too few "
                f"clean records reached it ({n_input} in the drop; see the quarantine by reason). Drop more data, or "
                f"lower the minimum with {how_to_set('curated_gate', 'min_rows')}")}, expectations=[
            gxe.ExpectColumnValuesToBeBetween(column="rows", min_value=thresholds.min_rows),
            gxe.ExpectColumnValuesToBeBetween(column="duplicate_ids", min_value=0, max_value=0),
            gxe.ExpectColumnValuesToBeBetween(column="duplicate_content", min_value=0, max_value=0),
        ]),
        Table("quarantine_by_reason", by_reason, [
            gxe.ExpectColumnValuesToBeBetween(column="ratio", max_value=thresholds.max_reason_ratio),
        ], explain={"ratio": f"one reason quarantined more than {thresholds.max_reason_ratio:.0%} of the drop: a "
                             "producer sends a defect in bulk (the reason names it). Fix the producer, or raise "
                             f"the bar with {how_to_set('curated_gate', 'max_reason_ratio')}"}),
        Table("reconciliation", totals, [
            gxe.ExpectColumnPairValuesToBeEqual(column_A="input", column_B="accounted"),
            gxe.ExpectColumnPairValuesToBeEqual(column_A="manifest_rows", column_B="stored_rows"),
            gxe.ExpectColumnPairValuesToBeEqual(column_A="manifest_quarantined", column_B="stored_quarantined"),
            gxe.ExpectColumnValuesToBeBetween(column="quarantine_ratio", max_value=thresholds.max_quarantine_ratio),
        ], explain={"quarantine_ratio": f"more than {thresholds.max_quarantine_ratio:.0%} of the drop was "
                                        "quarantined: the drop is too dirty to train on. See the quarantine by "
                                        f"reason; or raise the bar with "
                                        f"{how_to_set('curated_gate', 'max_quarantine_ratio')}"}),
    ]
    prefix = run_prefix(partition("quality", GATE, date), run_id)
    return run_gate(GATE, tables, lake, prefix)


def _stored(lake, shard: dict) -> dict:
    """What is stored of a shard against what its writer recorded (streamed: one MiB at a time)."""
    sha256, size = lake.digest(shard["key"], shard.get("bytes"))
    return {"shard": shard["key"], "bytes": size, "matches_manifest": sha256 == shard.get("sha256")}


def _repeats(hashes: list) -> int:
    """How many values repeat an earlier one, over every shard's 8-byte hashes."""
    import numpy as np

    joined = np.concatenate(hashes) if hashes else np.empty(0, dtype=np.uint64)
    return int(len(joined) - len(np.unique(joined)))


def _type_name(t) -> str:
    """An Arrow type as text, lists without their item's field name (Parquet calls it "element", Arrow "item")."""
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)
