"""Gate 3 (deploy → generate): the smoke test of a version's variants.

Every variant's record (built and measured by ``registry/deploy.py`` or ``registry/torch_variants.py``) is
re-checked: the weights load safely (hash and format), and the measured latency and the workload's own
checks (``Workload.variant_checks``: for images, agreement with fp32 and image spread) are held against
the thresholds (the core's in ``cfg.deploy_gate``, the workload's in its settings). The fp32 baseline must
pass for the gate to pass; other variants that miss a threshold are recorded as not eligible for generation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from aigc.config import PipelineConfig
from aigc.lake import Lake
from aigc.lake.keys import partition, run_prefix
from aigc.quality.gate import Table, run_gate
from aigc.registry.loader import load_serving
from aigc.registry.store import Registry

if TYPE_CHECKING:  # annotations only: the workload interface imports the stages' modules
    from aigc.workload import Workload

GATE = "deploy"


def smoke_test(lake: Lake, model: str, ref: str, cfg: PipelineConfig, date: str, workload: Workload) -> dict:
    """Gate 3 on a version's variants, judged by ``workload``: each must load
    safely; fp32 must be fast enough and pass the workload's checks; a variant that misses, or that is more than
    ``max_slowdown_vs_fp32`` times slower than fp32 here, is not eligible."""
    import great_expectations.expectations as gxe

    thresholds = cfg.deploy_gate
    registry = Registry(lake, model)
    record = registry.get(ref)
    version = record["version"]
    rows, check_names = [], []
    fp32_ms = (record.get("variants", {}).get("fp32") or {}).get("latency_ms_b1") or 0.0
    for kind, entry in sorted(record.get("variants", {}).items()):
        try:
            load_serving(lake, model, version, kind, "cpu", workload.serving)
            loads, error = True, ""
        except Exception as e:  # recorded, and fails the gate below: a variant must load
            loads, error = False, f"{type(e).__name__}: {e}"
        checks = workload.variant_checks(entry, cfg)
        check_names = list(checks)
        slowdown = entry["latency_ms_b1"] / fp32_ms if fp32_ms > 0 else 1.0
        row = {"variant": kind, "loads": loads, "error": error, "latency_ms_b1": entry["latency_ms_b1"],
               "slowdown_vs_fp32": round(slowdown, 3),
               **{name: entry.get(name) for name in checks}, "size_bytes": entry["size_bytes"],
               **{f"passes_{name}": ok for name, ok in checks.items()}}
        row["eligible"] = bool(loads and row["latency_ms_b1"] <= thresholds.max_latency_ms
                               and slowdown <= thresholds.max_slowdown_vs_fp32 and all(checks.values()))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["variant", "loads", "error", "latency_ms_b1", "slowdown_vs_fp32", *check_names,
                                        "size_bytes",
                                        *[f"passes_{n}" for n in check_names], "eligible"])
    baseline = frame[frame["variant"] == "fp32"]
    tables = [
        Table("baseline", baseline, [
            gxe.ExpectTableRowCountToEqual(value=1),
            gxe.ExpectColumnValuesToBeInSet(column="loads", value_set=[True]),
            gxe.ExpectColumnValuesToBeBetween(column="latency_ms_b1", max_value=thresholds.max_latency_ms),
            *[gxe.ExpectColumnValuesToBeInSet(column=f"passes_{n}", value_set=[True]) for n in check_names],
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
