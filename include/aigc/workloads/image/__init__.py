"""The built-in image workload: caption → image, a conditional VAE (``aigc.workloads.image.cvae``) over the curated
shapes drop, judged by the pixel checker (``aigc.workloads.image.checker``); its settings in ``config.py``."""

from __future__ import annotations

import numpy as np

from aigc.workload import Workload
from aigc.workloads.image.config import ImageSettings, image_settings

DATASET, MODEL = "shapes", "shapes-cvae"
"""The image workload's producer and curated dataset, and its model (the presets name them: ``config_overrides``)."""


class ImageWorkload(Workload):
    name = "image"
    description = "shapes captions → images: a conditional VAE, judged by a pixel checker"
    index_columns = ("caption", "width", "height")
    prompt_column = "caption"
    loss_parts = ("recon", "kl")
    loss_title = "training: negative ELBO per pixel"
    stages = frozenset({"prepare", "train", "deploy", "generate", "evaluate"})
    settings_class = ImageSettings
    cli_settings = {"make-raw": ("resolution",),
                    "prepare": ("resolution", "min_caption_chars", "max_caption_chars", "min_side", "max_side",
                                "max_image_pixels", "max_image_bytes", "near_dup_image_distance"),
                    "train": ("resolution", "channels", "latent_dim", "text_dim", "max_tokens", "kl_weight"),
                    "deploy": ("max_pixel_mae", "min_image_std"), "generate": ("blank_std",),
                    "evaluate": ("checker_images", "reference_seeds", "min_checker_accuracy", "max_fid")}
    preload_modules = tuple(f"aigc.workloads.image.{m}" for m in (
        "rawdrop", "records", "training", "variants", "prompts", "serving", "gallery", "gate", "evaluation", "report"))

    def config_overrides(self, preset):
        # Every variant kind (stage 4 serves what stage 5 recommended for the worker's device class: ``auto``).
        changes = {"raw": {"source": DATASET}, "prepare": {"dataset": DATASET}, "model": {"name": MODEL},
                   "deploy": {"variants": ",".join(self.variant_kinds)}}
        if preset == "smoke":  # a deployment check: fewer reference renderings, and the distribution bar is off
            # and the checker's bar is one a smoke day's few real images can show (0.97 needs 100 read without a miss)
            changes["workload"] = {"settings": {"reference_seeds": 1, "max_fid": 100.0, "min_checker_accuracy": 0.9}}
            # The baseline and INT8, whose build goes through the ONNX export and calibration (every variant kind
            # is built by tests/unit/registry/test_deploy.py).
            changes["deploy"] = {"variants": "fp32,int8", "calibration_samples": 64}
        return changes

    def sample_costs(self, columns, cfg):
        from aigc.workloads.image.tokenizer import words

        pixels = np.asarray(columns["width"], dtype=np.int64) * np.asarray(columns["height"], dtype=np.int64)
        tokens = np.array([len(words(c)) for c in columns["caption"]], dtype=np.int64)
        return sample_cost(pixels, tokens)

    def training_task(self, lake, index, cfg):
        from aigc.workloads.image.training import ImageTrainingTask

        return ImageTrainingTask(lake, index, cfg)

    def records(self, cfg):
        from aigc.workloads.image.records import ImageRecordRules

        return ImageRecordRules(image_settings(cfg))

    variant_kinds = ("fp32", "bf16", "pruned", "onnx", "int8")

    def serving(self, card, variant, data, device, version):
        from aigc.workloads.image.serving import serve

        return serve(card, variant, data, device, version)

    def smoke_prompts(self, n, seed):
        from aigc.workloads.image.variants import smoke_prompts

        return smoke_prompts(n, seed)[0]

    def variant_checks(self, entry, cfg):
        s = image_settings(cfg)
        return {"pixel_mae_vs_fp32": entry["pixel_mae_vs_fp32"] <= s.max_pixel_mae,
                "image_std": entry["image_std"] >= s.min_image_std}

    def build_variants(self, lake, model, version, cfg):
        from aigc.workloads.image.variants import build_variants

        return build_variants(lake, model, version, cfg.deploy, self.builds)

    output_columns = (("image", "binary"), ("width", "int32"), ("height", "int32"))

    def demo_prompts(self, lake, date, cfg, key):
        from aigc.workloads.image.prompts import make_demo_prompts

        return make_demo_prompts(lake, cfg.prepare.dataset, date, cfg.generate, key)

    def shard_model(self, lake, plan, cfg):
        from aigc.workloads.image.serving import shard_model

        return shard_model(lake, plan)

    def gallery(self, rows):
        from aigc.workloads.image.gallery import gallery_png

        return "gallery.png", gallery_png([r["image"] for r in rows], [r["prompt"] for r in rows])

    def generation_checks(self, rows, cfg):
        from aigc.workloads.image.gate import generation_checks

        return generation_checks(rows, cfg)

    def judge(self, lake, evaluation, cfg):
        from aigc.workloads.image.evaluation import ImageJudge

        return ImageJudge(lake, evaluation, cfg, self)

    def evaluation_checks(self, metrics, cfg):
        from aigc.workloads.image.gate import evaluation_checks

        return evaluation_checks(metrics, cfg.evaluate_gate, image_settings(cfg))

    def write_report(self, lake, prefix, metrics, points, front, record, generation):
        from aigc.workloads.image.report import write_report

        return write_report(lake, prefix, metrics, points, front, record, generation)

    def make_raw_drop(self, raw, date, cfg):
        from aigc.workloads.image.rawdrop import make_raw_drop

        return make_raw_drop(raw, date, cfg.raw, image_settings(cfg).resolution)


IMAGE = ImageWorkload()


def sample_cost(pixels: np.ndarray, tokens: np.ndarray, *, token_weight: float = 64.0) -> np.ndarray:
    """Relative compute of one sample: decoding and convolutions scale with pixels, the caption
    encoder with tokens (one token costs about as much as ``token_weight`` pixels here)."""
    return pixels.astype(np.float64) + token_weight * tokens.astype(np.float64)


def prepare_image(raw, lake, date, cfg, *, settings: ImageSettings | None = None, run_id: str | None = None) -> dict:
    """Stage 1 of the image workload on this host (``aigc.prepare.prepare`` with its record rules, ``settings`` or
    their defaults): what tests, benches and notebooks call where the pipeline would choose the workload by name.
    The curated dataset is the workload's (``DATASET``, as its presets name it) unless ``cfg`` names another."""
    import dataclasses

    from aigc.config import PrepareConfig
    from aigc.prepare import prepare
    from aigc.workloads.image.records import ImageRecordRules

    rules = ImageRecordRules(settings or ImageSettings())
    if cfg.dataset == PrepareConfig.dataset:  # the core's name for no workload's data
        cfg = dataclasses.replace(cfg, dataset=DATASET)
    return prepare(raw, lake, date, cfg, rules=rules, workload=IMAGE.name, run_id=run_id)
