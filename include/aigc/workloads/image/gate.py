"""The image workload's parts of gates 4 and 5: generated images decode at the model's size and are not blank;
the day's content and the recommended configuration are aligned with their prompts, the checker reads its reference
set and the day's real images right, generated images are distributed like real ones, and nothing blocked was drawn.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from PIL import Image

from aigc.config import EvaluationGateThresholds, PipelineConfig
from aigc.config.form import how_to_set, how_to_set_setting
from aigc.quality.evaluation import Check, figure
from aigc.workloads.image.config import ImageSettings, image_settings


def _image_stats(data: bytes | None) -> tuple[int | None, int | None, float | None]:
    if data is None:
        return None, None, None
    try:
        img = Image.open(io.BytesIO(data)).convert("RGB")
    except Exception:
        return -1, -1, None  # does not decode: fails the size expectation with the row named
    return img.width, img.height, float(np.asarray(img, dtype=np.float32).std())


def generation_checks(rows: pd.DataFrame, cfg: PipelineConfig):
    """The image workload's part of gate 4: images decode at the model's size and are not blank."""
    import great_expectations.expectations as gxe

    stats = [_image_stats(b) for b in rows["image"]]
    rows = rows.drop(columns=["image"]).assign(
        decoded_width=[s[0] for s in stats], decoded_height=[s[1] for s in stats], pixel_std=[s[2] for s in stats])
    generated = rows[rows["status"] == "generated"]
    s = image_settings(cfg)
    r = s.resolution
    blank = float((generated["pixel_std"] < s.blank_std).mean()) if len(generated) else 0.0
    return rows, [
        gxe.ExpectColumnValuesToBeBetween(column="decoded_width", min_value=r, max_value=r),
        gxe.ExpectColumnValuesToBeBetween(column="decoded_height", min_value=r, max_value=r),
    ], {"blank_fraction": (blank, cfg.generate_gate.max_blank_fraction)}


def evaluation_checks(metrics: dict, t: EvaluationGateThresholds, s: ImageSettings) -> list[Check]:
    """Gate 5's checks on an evaluation's ``metrics.json``, in the order the report lists them: ``t`` the core's
    thresholds, ``s`` the image workload's (the checker's accuracy, the Fréchet distance)."""
    iv = metrics["intervals"]
    rec = metrics.get("recommended") or {}
    config = f"{rec.get('variant')}/{rec.get('policy')}"

    def hi(e: dict | None) -> float:
        return e["hi"] if e and e.get("hi") is not None else 0.0  # nothing scored: nothing shown to be good

    def lo(e: dict | None, missing: float = 0.0) -> float:
        return e["lo"] if e and e.get("lo") is not None else missing

    train_longer = f"Train longer or on more data ({how_to_set('train', 'steps')})"
    accept = f"to accept it, lower the minimum with {how_to_set('evaluate_gate', 'min_alignment')}"
    checker_bar = f"lower the bar with {how_to_set_setting('image', 'min_checker_accuracy')}"
    return [
        Check("content_alignment", "alignment of the day's content", hi(iv["alignment"]), t.min_alignment, True,
              figure(iv["alignment"]),
              f"the all-attributes alignment of the day's generated images is {figure(iv['alignment'])}, "
              f"significantly below the minimum {t.min_alignment:g}: the images often miss the colour, shape, "
              f"size or position their prompt asks for. {train_longer}; {accept}."),
        Check("model_alignment", f"alignment of the recommended configuration ({config}) on the evaluation set",
              hi(iv.get("model_alignment")), t.min_alignment, True, figure(iv.get("model_alignment")),
              f"the recommended configuration {config} draws {figure(iv.get('model_alignment'))} of the fixed "
              f"evaluation prompts (every attribute combination) right, significantly below the minimum "
              f"{t.min_alignment:g}: the model does not cover the whole caption grammar. {train_longer}; {accept}."),
        Check("checker_reference", "checker accuracy on its reference set", hi(iv["checker_reference"]),
              s.min_checker_accuracy, True, figure(iv["checker_reference"], "{:.4f}"),
              f"the checker reads its fixed reference scenes right {figure(iv['checker_reference'], '{:.4f}')}, "
              f"significantly below the minimum {s.min_checker_accuracy:g}: no alignment figure can be trusted. "
              "The checker or the reference world changed: see checker_reference.misread in metrics.json for "
              f"examples, and fix the checker; or {checker_bar}."),
        Check("checker_real", "checker accuracy on the day's held-out real images", hi(iv["checker_real"]),
              s.min_checker_accuracy, True, figure(iv["checker_real"], "{:.4f}"),
              f"the checker reads the day's held-out real images right {figure(iv['checker_real'], '{:.4f}')}, "
              f"significantly below the minimum {s.min_checker_accuracy:g}, though it reads its reference set "
              "well: the day's data differ from the reference world (a new source, resolution or caption style?). "
              f"Inspect the curated partition; or {checker_bar}."),
        Check("fid", "Fréchet distance to real images", lo(iv["fid"], 1e9), s.max_fid, False,
              figure(iv["fid"], "{:.4f}"),
              f"the Fréchet distance between generated and real images is {figure(iv['fid'], '{:.4f}')}, "
              f"significantly above the maximum {s.max_fid:g}: the generated images are not distributed like real "
              f"ones (colours, backgrounds, placement or sizes are off). {train_longer}; to accept it, raise the "
              f"maximum with {how_to_set_setting('image', 'max_fid')}."),
        Check("safety_violations", "generated images for prompts with blocked terms",
              float(metrics["safety_violations"]), 0.0, False, str(metrics["safety_violations"]),
              f"{metrics['safety_violations']} image(s) were generated for prompts with blocked terms, where the "
              "maximum is 0: stage 4's refusal did not hold. Check the blocklist (--blocklist on `aigc prepare`) "
              "and the generation run; this check has no threshold to change."),
    ]


