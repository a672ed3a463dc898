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
from aigc.evaluate.stats import design
from aigc.quality.evaluation import Check, alignment_checks, evidence_check, figure
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
    thresholds, ``s`` the image workload's (the checker's accuracy, the Fréchet distance). Each passes only on
    evidence (``evidence_check``)."""
    iv = metrics["intervals"]
    rec = metrics.get("recommended") or {}
    config = f"{rec.get('variant')}/{rec.get('policy')}"
    train_longer = f"Train longer or on more data ({how_to_set('train', 'steps')})"
    accept = f"to accept it, lower the minimum with {how_to_set('evaluate_gate', 'min_alignment')}"
    checker_bar = f"lower the bar with {how_to_set_setting('image', 'min_checker_accuracy')}"
    real = iv["checker_real"] or {}

    def one_look(estimate: dict | None) -> dict | None:
        """A checker's accuracy is read once (its sample is what the day and the reference set hold): its designed
        rates at that sample."""
        if not estimate or not estimate.get("n"):
            return None
        return {"rounds": 1, "max_rounds": 1, "designed": design(
            s.min_checker_accuracy, s.expected_checker_accuracy, estimate["n"],
            confidence=estimate.get("confidence", 0.95), max_rounds=1)}

    return [
        *alignment_checks(metrics, t, (
            "alignment of the day's content",
            "the all-attributes alignment of the day's generated images is {figure}, significantly below the minimum "
            "{minimum}: the images often miss the colour, shape, size or position their prompt asks for. "
            f"{train_longer}; {accept}."), (
            f"alignment of the recommended configuration ({config}) on the evaluation set",
            f"the recommended configuration {config} draws {{figure}} of the fixed evaluation prompts (every "
            "attribute combination) right, significantly below the minimum {minimum}: the model does not cover the "
            f"whole caption grammar. {train_longer}; {accept}.")),
        evidence_check("checker_reference", "checker accuracy on its reference set", iv["checker_reference"],
                       s.min_checker_accuracy,
                       f"the checker reads its fixed reference scenes right {figure(iv['checker_reference'], '{:.4f}')}"
                       f", significantly below the minimum {s.min_checker_accuracy:g}: no alignment figure can be "
                       "trusted. The checker or the reference world changed: see checker_reference.misread in "
                       f"metrics.json for examples, and fix the checker; or {checker_bar}.", scale="{:.4f}",
                       more=f"Render more reference scenes with {how_to_set_setting('image', 'reference_seeds')}.",
                       looked=one_look(iv["checker_reference"])),
        evidence_check("checker_real", "checker accuracy on the day's real images", real, s.min_checker_accuracy,
                       f"the checker reads the day's real images right {figure(real, '{:.4f}')}, significantly below "
                       f"the minimum {s.min_checker_accuracy:g}, though it reads its reference set well: the day's "
                       "data differ from the reference world (a new source, resolution or caption style?). Inspect "
                       f"the curated partition; or {checker_bar}.", scale="{:.4f}",
                       more=f"It read {real.get('n', 0)} of the day's curated images: read more with "
                            f"{how_to_set_setting('image', 'checker_images')}.", looked=one_look(real)),
        evidence_check("fid", "Fréchet distance to real images", iv["fid"], s.max_fid,
                       f"the Fréchet distance between generated and real images is {figure(iv['fid'], '{:.4f}')}, "
                       f"significantly above the maximum {s.max_fid:g}: the generated images are not distributed "
                       f"like real ones (colours, backgrounds, placement or sizes are off). {train_longer}; to accept "
                       f"it, raise the maximum with {how_to_set_setting('image', 'max_fid')}.", at_least=False,
                       scale="{:.4f}", more="More held-out real images (a larger day) and more generated images "
                                            "narrow it."),
        blocked_terms_check(metrics),
    ]


def blocked_terms_check(metrics: dict) -> Check:
    """No image was drawn for a prompt with a blocked term."""
    n = metrics["safety_violations"]
    return Check("safety_violations", "generated images for prompts with blocked terms", float(n), 0.0, False, str(n),
                 f"{n} image(s) were generated for prompts with blocked terms, where the maximum is 0: stage 4's "
                 "refusal did not hold. Check the blocklist (--blocklist on `aigc prepare`) and the generation run; "
                 "this check has no threshold to change.")
