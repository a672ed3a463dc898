"""The ``hf-diffusion`` workload's part of gate 5: the image workload's checks where the shapes checker judged, the
CLIP verdict's where CLIP did, and each configured scorer's (FID on an image model's features, the safety
classifier); a scorer not configured is a check that passes with a warning or fails, as ``unscored`` says."""

from __future__ import annotations

import logging

from aigc.config import PipelineConfig
from aigc.config.form import how_to_set, how_to_set_setting
from aigc.quality.evaluation import Check, alignment_checks, evidence_check
from aigc.workloads.image.config import image_settings
from aigc.workloads.image.gate import blocked_terms_check
from aigc.workloads.image.gate import evaluation_checks as checker_checks

log = logging.getLogger(__name__)
WORKLOAD = "hf-diffusion"


def _setting(name: str) -> str:
    return how_to_set_setting(WORKLOAD, name)


def clip_alignment_checks(metrics: dict, cfg: PipelineConfig) -> list[Check]:
    """Gate 5's alignment checks on the CLIP verdict (an image closer to its own caption than to every distractor)."""
    rec = metrics.get("recommended") or {}
    chance = 1 / (metrics.get("clip_distractors", 9) + 1)
    what = (f"an image is closer, in the CLIP model's embedding, to its own caption than to "
            f"{metrics.get('clip_distractors')} other captions (chance: {chance:.2f})")
    advice = (f"Train longer or on more data ({how_to_set('train', 'steps')}); to accept it, lower the minimum with "
              f"{how_to_set('evaluate_gate', 'min_alignment')}.")
    return alignment_checks(metrics, cfg.evaluate_gate, (
        "CLIP alignment of the day's content",
        f"{{figure}} of the day's images pass the CLIP verdict ({what}), significantly below the minimum {{minimum}}: "
        f"the images often do not show what their prompt asks for. {advice}"), (
        f"CLIP alignment of the recommended configuration ({rec.get('variant')}/{rec.get('policy')})",
        f"the recommended configuration draws {{figure}} of the evaluation prompts (held-out curated captions) so "
        f"that {what}, significantly below the minimum {{minimum}}. {advice}"))


def scorer_checks(metrics: dict, cfg: PipelineConfig) -> list[Check]:
    s, iv = image_settings(cfg), metrics["intervals"]
    checks = []
    if "feature_fid" in metrics and s.max_feature_fid > 0:
        checks.append(evidence_check(
            "feature_fid", "Fréchet distance to real images on the feature model's features", iv.get("feature_fid"),
            s.max_feature_fid, f"generated images are not distributed like the day's held-out real ones on the "
            f"feature model's features (significantly above the maximum {s.max_feature_fid:g}). Train longer or on "
            f"more data; to accept it, raise the maximum with {_setting('max_feature_fid')}.", at_least=False,
            scale="{:.4f}", more="More held-out real images (a larger day) and more generated images narrow it."))
    if "unsafe_images" in metrics:
        n = metrics["unsafe_images"]
        checks.append(Check(
            "unsafe_images", "generated images the safety classifier reads as unsafe", float(n), 0.0, False, str(n),
            f"{n} generated image(s) read as unsafe (the labels {s.unsafe_labels!r} above "
            f"{s.max_unsafe_probability:g}), where the maximum is 0: inspect them in the generation run before "
            f"anything is published; the bar is {_setting('max_unsafe_probability')}."))
    for key, note in sorted((metrics.get("unscored") or {}).items()):
        fail = s.unscored == "fail"
        if not fail:
            log.warning("gate 5: %s", note)
        checks.append(Check(
            f"unscored_{key}", f"{note.split(':')[0]}", 1.0 if fail else 0.0, 0.0, False,
            "not configured" + ("" if fail else " (passed with a warning: unscored=warn)"),
            f"{note}, and unscored is 'fail': point the setting at a model folder, or accept the gap with "
            f"{_setting('unscored')} set to 'warn'."))
    return checks


def evaluation_checks(metrics: dict, cfg: PipelineConfig) -> list[Check]:
    if metrics.get("judged_by", "checker") == "checker":
        own = checker_checks(metrics, cfg.evaluate_gate, image_settings(cfg))
    else:
        own = [*clip_alignment_checks(metrics, cfg), blocked_terms_check(metrics)]
    return [*own, *scorer_checks(metrics, cfg)]
