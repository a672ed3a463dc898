"""Gate 4 (generate → evaluate): one row per prompt, refused prompts recorded as refused (never generated),
and the workload's checks on the outputs (images: they decode at the model's size and are not blank)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from PIL import Image

from aigc.config import GenerateGateThresholds, PipelineConfig
from aigc.generate.run import MANIFEST, expected_prompt_ids, generation_prefix, generation_rows
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.prepare.checks import blocked_term
from aigc.quality.gate import Table, run_gate

GATE = "generate"


def _image_stats(data: bytes | None) -> tuple[int | None, int | None, float | None]:
    if data is None:
        return None, None, None
    try:
        img = Image.open(io.BytesIO(data)).convert("RGB")
    except Exception:
        return -1, -1, None  # does not decode: fails the size expectation with the row named
    return img.width, img.height, float(np.asarray(img, dtype=np.float32).std())


def image_checks(rows: pd.DataFrame, cfg: PipelineConfig, thresholds: GenerateGateThresholds):
    """The image workload's part of gate 4: images decode at the model's size and are not blank."""
    import great_expectations.expectations as gxe

    stats = [_image_stats(b) for b in rows["image"]]
    rows = rows.drop(columns=["image"]).assign(
        decoded_width=[s[0] for s in stats], decoded_height=[s[1] for s in stats], pixel_std=[s[2] for s in stats])
    generated = rows[rows["status"] == "generated"]
    r = cfg.model.resolution
    blank = float((generated["pixel_std"] < thresholds.blank_std).mean()) if len(generated) else 0.0
    return rows, [
        gxe.ExpectColumnValuesToBeBetween(column="decoded_width", min_value=r, max_value=r),
        gxe.ExpectColumnValuesToBeBetween(column="decoded_height", min_value=r, max_value=r),
    ], {"blank_fraction": (blank, thresholds.max_blank_fraction)}


def validate_generation(lake: Lake, plan: dict, cfg: PipelineConfig, thresholds: GenerateGateThresholds,
                        workload=None) -> dict:
    """Gate 4 on a finished generation run: the core's ledger checks (every prompt answered once, refused prompts
    refused with a reason and nothing generated for them, no blocked prompt generated), then the workload's."""
    import great_expectations.expectations as gxe

    from aigc.workloads import load_workload

    workload = workload or load_workload("image")
    prefix = generation_prefix(plan["model"], plan["date"], plan["run_id"])
    manifest = lake.get_json(join(prefix, MANIFEST))
    rows = generation_rows(lake, manifest).to_pandas()
    outputs = [n for n, _ in workload.output_columns]
    rows = rows.assign(has_output=rows[outputs[0]].notna() if outputs else False,
                       should_refuse=[blocked_term(p, cfg.prepare.blocklist) is not None for p in rows["prompt"]])
    rows, expectations, figures = workload.generation_checks(rows, cfg, thresholds)
    generated = rows[rows["status"] == "generated"]
    refused = rows[rows["status"] == "refused"]
    expected_ids = expected_prompt_ids(lake, {"prompts_pinned": manifest["prompts_pinned"],
                                              "shards": manifest["plan_shards"]})
    summary = pd.DataFrame([{
        "prompts": len(expected_ids), "rows": len(rows),
        "missing": len(expected_ids - set(rows["prompt_id"])), "unexpected": len(set(rows["prompt_id"]) - expected_ids),
        **{name: value for name, (value, _) in figures.items()},
    }])
    tables = [
        Table("outputs", rows, [
            gxe.ExpectColumnValuesToBeUnique(column="prompt_id"),
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["generated", "refused"]),
        ]),
        Table("generated", generated, [
            *expectations,
            gxe.ExpectColumnValuesToBeInSet(column="has_output", value_set=[True]),
            gxe.ExpectColumnValuesToBeInSet(column="should_refuse", value_set=[False]),
        ]),
        Table("refused", refused, [
            gxe.ExpectColumnValuesToBeInSet(column="has_output", value_set=[False]),  # refused means no output
            gxe.ExpectColumnValuesToNotBeNull(column="reason"),
        ]),
        Table("ledger", summary, [
            gxe.ExpectColumnPairValuesToBeEqual(column_A="prompts", column_B="rows"),
            gxe.ExpectColumnValuesToBeBetween(column="missing", max_value=0),
            gxe.ExpectColumnValuesToBeBetween(column="unexpected", max_value=0),
            *[gxe.ExpectColumnValuesToBeBetween(column=name, max_value=limit) for name, (_, limit) in figures.items()],
        ]),
    ]
    return run_gate(GATE, tables, lake, run_prefix(partition("quality", GATE, plan["date"]), plan["run_id"]))
