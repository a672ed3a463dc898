"""The built-in image workload: caption → image, a conditional VAE (``aigc.workloads.image.cvae``) over the curated
shapes drop (``aigc.prepare``), judged by the pixel checker (``aigc.evaluate``)."""

from __future__ import annotations

import numpy as np

from aigc.workload import Workload


class ImageWorkload(Workload):
    name = "image"
    description = "shapes captions → images: a conditional VAE, judged by a pixel checker"
    index_columns = ("caption", "width", "height")
    loss_parts = ("recon", "kl")
    loss_title = "training: negative ELBO per pixel"
    stages = frozenset({"prepare", "train", "deploy", "generate", "evaluate"})
    preload_modules = ("aigc.train.balance", *(f"aigc.workloads.image.{m}" for m in (
        "rawdrop", "records", "training", "variants", "prompts", "engine", "gallery", "gate", "evaluation", "report")))

    def sample_costs(self, columns, cfg):
        from aigc.train.balance import sample_cost
        from aigc.workloads.image.tokenizer import words

        pixels = np.asarray(columns["width"], dtype=np.int64) * np.asarray(columns["height"], dtype=np.int64)
        tokens = np.array([len(words(c)) for c in columns["caption"]], dtype=np.int64)
        return sample_cost(pixels, tokens)

    def training_task(self, lake, index, cfg):
        from aigc.workloads.image.training import ImageTrainingTask

        return ImageTrainingTask(lake, index, cfg)

    def records(self, cfg):
        from aigc.workloads.image.records import ImageRecordRules

        return ImageRecordRules()

    variant_kinds = ("fp32", "bf16", "pruned", "onnx", "int8")

    def serving(self, card, variant, data, device, version):
        from aigc.workloads.image.serving import serve

        return serve(card, variant, data, device, version)

    def smoke_prompts(self, n, seed):
        from aigc.workloads.image.variants import smoke_prompts

        return smoke_prompts(n, seed)[0]

    def variant_checks(self, entry, thresholds):
        return {"pixel_mae_vs_fp32": entry["pixel_mae_vs_fp32"] <= thresholds.max_pixel_mae,
                "image_std": entry["image_std"] >= thresholds.min_image_std}

    def build_variants(self, lake, model, version, cfg):
        from aigc.workloads.image.variants import build_variants

        return build_variants(lake, model, version, cfg.deploy)

    output_columns = (("image", "binary"), ("width", "int32"), ("height", "int32"))

    def demo_prompts(self, lake, date, cfg, key):
        from aigc.workloads.image.prompts import make_demo_prompts

        return make_demo_prompts(lake, cfg.prepare.dataset, date, cfg.generate, key)

    def generate_shard(self, lake, plan, prompts, cfg):
        from aigc.workloads.image.engine import ShardEngine

        return ShardEngine(lake, plan, cfg).run(prompts)

    def gallery(self, rows):
        from aigc.workloads.image.gallery import gallery_png

        return "gallery.png", gallery_png([r["image"] for r in rows], [r["prompt"] for r in rows])

    def generation_checks(self, rows, cfg, thresholds):
        from aigc.workloads.image.gate import generation_checks

        return generation_checks(rows, cfg, thresholds)

    def evaluate(self, lake, generation, cfg, run_id):
        from aigc.workloads.image.evaluation import evaluate

        return evaluate(lake, generation, cfg, run_id=run_id)

    def evaluation_checks(self, metrics, thresholds):
        from aigc.workloads.image.gate import evaluation_checks

        return evaluation_checks(metrics, thresholds)

    def write_report(self, lake, prefix, metrics, points, front, record, generation):
        from aigc.workloads.image.report import write_report

        return write_report(lake, prefix, metrics, points, front, record, generation)

    def make_raw_drop(self, raw, date, cfg):
        from aigc.workloads.image.rawdrop import make_raw_drop

        return make_raw_drop(raw, date, cfg.raw)


IMAGE = ImageWorkload()


def prepare_image(raw, lake, date, cfg, *, run_id: str | None = None) -> dict:
    """Stage 1 of the image workload on this host (``aigc.prepare.prepare`` with its record rules): what tests,
    benches and notebooks call where the pipeline would choose the workload by name."""
    from aigc.prepare import prepare

    return prepare(raw, lake, date, cfg, rules=IMAGE.records(None), workload=IMAGE.name, run_id=run_id)
