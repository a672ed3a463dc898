"""The built-in image workload: caption → image, a conditional VAE (``aigc.models.cvae``) over the curated
shapes drop (``aigc.prepare``), judged by the pixel checker (``aigc.evaluate``)."""

from __future__ import annotations

import numpy as np

from aigc.workloads.base import Workload


class ImageWorkload(Workload):
    name = "image"
    description = "shapes captions → images: a conditional VAE, judged by a pixel checker"
    index_columns = ("caption", "width", "height")
    loss_parts = ("recon", "kl")
    loss_title = "training: negative ELBO per pixel"
    stages = frozenset({"prepare", "train", "deploy", "generate", "evaluate"})

    def sample_costs(self, columns, cfg):
        from aigc.models.tokenizer import words
        from aigc.train.balance import sample_cost

        pixels = np.asarray(columns["width"], dtype=np.int64) * np.asarray(columns["height"], dtype=np.int64)
        tokens = np.array([len(words(c)) for c in columns["caption"]], dtype=np.int64)
        return sample_cost(pixels, tokens)

    def training_task(self, lake, index, cfg):
        from aigc.workloads.image.training import ImageTrainingTask

        return ImageTrainingTask(lake, index, cfg)

    def records(self, cfg):
        from aigc.workloads.image.records import ImageRecordRules

        return ImageRecordRules()

    def make_raw_drop(self, raw, date, cfg):
        from aigc.prepare.rawdrop import make_raw_drop

        return make_raw_drop(raw, date, cfg.raw)


IMAGE = ImageWorkload()
