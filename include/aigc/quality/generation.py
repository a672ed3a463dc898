"""Gate 4 (generate → evaluate): one row per prompt, images that decode at the model's size and
are not blank, refused prompts recorded as refused (never generated)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from PIL import Image

from aigc.config import GenerateGateThresholds, PipelineConfig
from aigc.generate.prompts import load_prompts
from aigc.generate.run import MANIFEST, generation_prefix, generation_rows
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


def validate_generation(lake: Lake, plan: dict, cfg: PipelineConfig, thresholds: GenerateGateThresholds) -> dict:
    import great_expectations.expectations as gxe

    prefix = generation_prefix(plan["model"], plan["date"], plan["run_id"])
    manifest = lake.get_json(join(prefix, MANIFEST))
    rows = generation_rows(lake, manifest).to_pandas()
    stats = [_image_stats(b) for b in rows["image"]]
    rows = rows.drop(columns=["image"]).assign(
        decoded_width=[s[0] for s in stats], decoded_height=[s[1] for s in stats], pixel_std=[s[2] for s in stats],
        should_refuse=[blocked_term(p, cfg.prepare.blocklist) is not None for p in rows["prompt"]])
    generated = rows[rows["status"] == "generated"]
    refused = rows[rows["status"] == "refused"]
    expected_ids = {p["prompt_id"] for p in load_prompts(lake, manifest["prompts_key"], cfg.generate)}
    r = cfg.model.resolution
    summary = pd.DataFrame([{
        "prompts": len(expected_ids), "rows": len(rows),
        "missing": len(expected_ids - set(rows["prompt_id"])), "unexpected": len(set(rows["prompt_id"]) - expected_ids),
        "blank_fraction": float((generated["pixel_std"] < thresholds.blank_std).mean()) if len(generated) else 0.0,
    }])
    tables = [
        Table("outputs", rows, [
            gxe.ExpectColumnValuesToBeUnique(column="prompt_id"),
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["generated", "refused"]),
        ]),
        Table("generated", generated, [
            gxe.ExpectColumnValuesToBeBetween(column="decoded_width", min_value=r, max_value=r),
            gxe.ExpectColumnValuesToBeBetween(column="decoded_height", min_value=r, max_value=r),
            gxe.ExpectColumnValuesToBeInSet(column="should_refuse", value_set=[False]),
        ]),
        Table("refused", refused, [
            gxe.ExpectColumnValuesToBeNull(column="decoded_width"),  # refused means no image
            gxe.ExpectColumnValuesToNotBeNull(column="reason"),
        ]),
        Table("ledger", summary, [
            gxe.ExpectColumnPairValuesToBeEqual(column_A="prompts", column_B="rows"),
            gxe.ExpectColumnValuesToBeBetween(column="missing", max_value=0),
            gxe.ExpectColumnValuesToBeBetween(column="unexpected", max_value=0),
            gxe.ExpectColumnValuesToBeBetween(column="blank_fraction", max_value=thresholds.max_blank_fraction),
        ]),
    ]
    return run_gate(GATE, tables, lake, run_prefix(partition("quality", GATE, plan["date"]), plan["run_id"]))
