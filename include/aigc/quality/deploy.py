"""Gate 3 (deploy → generate): the smoke test of a version's variants.

Every variant's record (built and measured by ``registry/deploy.py``) is re-checked: the
weights load safely (hash and format), and the measured latency, agreement with fp32 and
image spread are held against the thresholds. The fp32 baseline must pass for the gate to
pass; other variants that miss a threshold are recorded as not eligible for generation.
"""

from __future__ import annotations

import pandas as pd

from aigc.config import DeployGateThresholds
from aigc.lake import Lake
from aigc.lake.keys import partition, run_prefix
from aigc.quality.gate import Table, run_gate
from aigc.registry.loader import Generator
from aigc.registry.store import Registry

GATE = "deploy"


def smoke_test(lake: Lake, model: str, ref: str, thresholds: DeployGateThresholds, date: str) -> dict:
    import great_expectations.expectations as gxe

    registry = Registry(lake, model)
    record = registry.get(ref)
    version = record["version"]
    rows = []
    for kind, entry in sorted(record.get("variants", {}).items()):
        try:
            Generator.load(lake, model, version, kind)
            loads, error = True, ""
        except Exception as e:  # recorded, and fails the gate below: a variant must load
            loads, error = False, f"{type(e).__name__}: {e}"
        row = {"variant": kind, "loads": loads, "error": error, "latency_ms_b1": entry["latency_ms_b1"],
               "pixel_mae_vs_fp32": entry["pixel_mae_vs_fp32"], "image_std": entry["image_std"],
               "size_bytes": entry["size_bytes"]}
        row["eligible"] = bool(loads and row["latency_ms_b1"] <= thresholds.max_latency_ms
                               and row["pixel_mae_vs_fp32"] <= thresholds.max_pixel_mae
                               and row["image_std"] >= thresholds.min_image_std)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["variant", "loads", "error", "latency_ms_b1", "pixel_mae_vs_fp32",
                                        "image_std", "size_bytes", "eligible"])
    baseline = frame[frame["variant"] == "fp32"]
    tables = [
        Table("baseline", baseline, [
            gxe.ExpectTableRowCountToEqual(value=1),
            gxe.ExpectColumnValuesToBeInSet(column="loads", value_set=[True]),
            gxe.ExpectColumnValuesToBeBetween(column="latency_ms_b1", max_value=thresholds.max_latency_ms),
            gxe.ExpectColumnValuesToBeBetween(column="image_std", min_value=thresholds.min_image_std),
        ]),
        Table("variants", frame, [
            gxe.ExpectColumnValuesToBeInSet(column="loads", value_set=[True]),  # a broken variant is a bug
        ]),
    ]
    eligible = frame.loc[frame["eligible"], "variant"].tolist()
    result = run_gate(GATE, tables, lake, run_prefix(partition("quality", GATE, date), version))
    registry.update_record(version, smoke_test={"passed": True, "eligible_variants": eligible,
                                                "result_uri": result["result_uri"]})
    return {**result, "model": model, "version": version, "eligible_variants": eligible,
            "not_eligible": frame.loc[~frame["eligible"], "variant"].tolist()}
