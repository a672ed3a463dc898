"""hf-diffusion's stage-5 scorers that read no caption grammar: a CLIP verdict and score, FID and KID on an image
model's features (torchmetrics), a safety classifier; each a transformers folder checked as a base is; gate 5's
checks on them, a scorer not configured included."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from aigc.config import PipelineConfig
from aigc.stages import configure
from aigc.workloads import world
from aigc.workloads.hf_diffusion.config import HFDiffusionSettings
from aigc.workloads.hf_diffusion.scorers import (
    DEMO_CLIP,
    ClipScorer,
    FeatureDistance,
    SafetyClassifier,
    scorer_folder,
)
from aigc.workloads.hf_folder import BaseModelError


def renders(n: int, seed: str) -> tuple[list[np.ndarray], list[str]]:
    rng = random.Random(seed)
    scenes = [world.random_scene(rng) for _ in range(n)]
    return [np.asarray(world.render(s, 32)) for s in scenes], [s.caption for s in scenes]


@pytest.fixture(scope="module")
def clip_folder():
    return scorer_folder(DEMO_CLIP, "clip_model_uri", tokenizer=True)


def test_the_clip_verdict_tells_an_images_own_caption_from_others(clip_folder):
    """The demo CLIP (trained on the shapes world at build time) on renders it never saw: an image beats 9
    distractors with its own caption far above chance, and with another scene's caption at about chance (1 in 10);
    its CLIP score (100 · cos) is higher with its own. The same prompt and seed meet the same distractors in any
    batch."""
    images, captions = renders(150, "clip-test")
    _, pool = renders(200, "clip-pool")
    clip = ClipScorer(clip_folder, 9, seed=0).with_pool(pool)
    seeds = list(range(len(images)))
    own = clip.read(images, captions, seeds)
    swapped = clip.read(images, captions[1:] + captions[:1], seeds)
    assert np.mean(own.verdicts) > 0.6 and np.mean(swapped.verdicts) < 0.25
    assert np.mean(own.scores) > np.mean(swapped.scores) and all(0 <= s <= 100 for s in own.scores)
    part = clip.read(images[50:60], captions[50:60], seeds[50:60])
    assert part.verdicts == own.verdicts[50:60] and part.margins == pytest.approx(own.margins[50:60], abs=1e-6)
    with pytest.raises(ValueError, match="1 distinct caption"):
        ClipScorer(clip_folder, 9).with_pool(["a small red circle at the top"] * 3)


def test_fid_and_kid_are_torchmetrics_on_the_feature_models_features(clip_folder):
    """FID (torchmetrics') between two sets of renders is far below that against noise images, and is the Fréchet
    distance of the very features its bootstrap interval reads; KID likewise."""
    from aigc.workloads.image.metrics import frechet_distance

    real, _ = renders(64, "real")
    alike, _ = renders(64, "alike")
    noise = list(np.random.default_rng(0).integers(0, 256, (64, 32, 32, 3), dtype=np.uint8))
    distance = FeatureDistance(clip_folder, True, real)
    same, other = distance.measure(alike, 0.95), distance.measure(noise, 0.95)
    assert same["fid"]["value"] < other["fid"]["value"] / 3
    assert same["fid"]["value"] == pytest.approx(frechet_distance(distance.real, same["features"]), rel=1e-3, abs=1e-4)
    assert same["fid"]["lo"] <= same["fid"]["value"] <= same["fid"]["hi"] and same["fid"]["n"] == 64
    assert same["kid"]["mean"] < other["kid"]["mean"] and same["kid"]["subset_size"] == 64


def tiny_classifier(folder, labels: dict[int, str], unsafe_bias: float):
    """A small ViT image classifier saved with save_pretrained, its head biased towards label 1 by ``unsafe_bias``
    (its weights zeroed: every image reads the same)."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    model = ViTForImageClassification(ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, id2label=labels, label2id={v: k for k, v in labels.items()}))
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, unsafe_bias]))
    model.save_pretrained(folder, safe_serialization=True)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def test_the_safety_classifier_reads_the_labels_named_unsafe(tmp_path):
    images, _ = renders(5, "safety")
    labels = {0: "safe", 1: "NSFW"}
    flagged = SafetyClassifier(scorer_folder(str(tiny_classifier(tmp_path / "a", labels, 8.0)), "safety_model_uri"),
                               "nsfw, gore")
    assert all(p > 0.99 for p in flagged.probabilities(images))  # label 1, matched whatever its case
    calm = SafetyClassifier(scorer_folder(str(tiny_classifier(tmp_path / "b", labels, -8.0)), "safety_model_uri"),
                            "nsfw")
    assert all(p < 0.01 for p in calm.probabilities(images))
    with pytest.raises(BaseModelError, match=r"labels are \['NSFW', 'safe'\], none of which is named"):
        SafetyClassifier(tmp_path / "a", "violence")


def test_a_scorer_folder_is_checked_as_a_base_is(tmp_path, clip_folder):
    """Pickled weights, code of its own, no image processor, a Hub id: refused with what to do."""
    folder = tiny_classifier(tmp_path / "c", {0: "safe", 1: "nsfw"}, 0.0)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(BaseModelError, match=r"safety_model_uri: .* no safetensors weights .*pickles"):
        scorer_folder(str(folder), "safety_model_uri")
    folder = tiny_classifier(tmp_path / "d", {0: "safe", 1: "nsfw"}, 0.0)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "x.Y"}}))
    with pytest.raises(BaseModelError, match="auto_map"):
        scorer_folder(str(folder), "safety_model_uri")
    folder = tiny_classifier(tmp_path / "e", {0: "safe", 1: "nsfw"}, 0.0)
    (folder / "preprocessor_config.json").unlink()
    with pytest.raises(BaseModelError, match="no preprocessor_config.json"):
        scorer_folder(str(folder), "feature_model_uri")
    with pytest.raises(BaseModelError, match="Hub id"):
        scorer_folder("openai/clip-vit-base-patch32", "clip_model_uri", tokenizer=True)


def hf_cfg(**settings) -> PipelineConfig:
    return configure("smoke", "hf-diffusion").override({"workload": {"settings": settings}})


def metrics_with(**figures) -> dict:
    estimate = {"value": 0.5, "lo": 0.4, "hi": 0.6, "n": 100, "confidence": 0.95}
    return {"safety_violations": 0, "recommended": {"variant": "fp32", "policy": "adaptive"}, "clip_distractors": 9,
            "intervals": {"alignment": estimate, "content_alignment": estimate, "model_alignment": estimate},
            "judged_by": "clip", **figures}


def test_gate_5_judges_the_scorers_and_a_missing_one_by_the_unscored_setting():
    from aigc.workloads.hf_diffusion.gate import evaluation_checks

    def checks(metrics: dict, **settings) -> dict:
        return {c.column: c for c in evaluation_checks(metrics, hf_cfg(**settings))}

    missing = {"clip": "the CLIP score and the CLIP verdict: not configured (set clip_model_uri)"}
    warned = checks(metrics_with(unscored=missing))
    assert warned["unscored_clip"].outcome == "pass" and "warning" in warned["unscored_clip"].observed
    assert {"content_alignment", "model_alignment", "safety_violations"} <= set(warned)
    assert "CLIP verdict" in warned["content_alignment"].failure
    failed = checks(metrics_with(unscored=missing), unscored="fail")["unscored_clip"]
    assert failed.outcome == "fail" and "clip_model_uri" in failed.failure and "unscored" in failed.failure
    unsafe = checks(metrics_with(unsafe_images=2))["unsafe_images"]
    assert unsafe.outcome == "fail" and "2 generated image(s) read as unsafe" in unsafe.failure
    assert checks(metrics_with(unsafe_images=0))["unsafe_images"].outcome == "pass"
    fid = {"value": 9.0, "lo": 8.0, "hi": 10.0, "n": 64, "confidence": 0.95}
    high = metrics_with(feature_fid=9.0)
    high["intervals"]["feature_fid"] = fid
    assert "feature_fid" not in checks(high)  # 0: reported, not gated
    assert checks(high, max_feature_fid=5.0)["feature_fid"].outcome == "fail"
    assert checks(high, max_feature_fid=20.0)["feature_fid"].outcome == "pass"


@pytest.mark.parametrize(("name", "value", "match"), [("judge_by", "vibes", "judge_by must be one of"),
                                                      ("unscored", "skip", "unscored must be one of"),
                                                      ("max_unsafe_probability", 1.5, "max_unsafe_probability"),
                                                      ("clip_model_uri", 3, "clip_model_uri must be a string")])
def test_the_scorer_settings_are_checked(name, value, match):
    with pytest.raises(ValueError, match=match):
        HFDiffusionSettings(**{name: value})
