"""The ``hf-diffusion`` workload's stage 2: the base pipeline's UNet fine-tuned on the window's captioned images by
the denoising objective (``denoising``), every weight or LoRA adapters (fused into the weights before registering),
under the DDP core.

A sample is a curated image at the workload's resolution, in [-1, 1], and its caption in the base's own tokenizer.
Every rank loads the base from the same local folder (``base.local_folder``), so the run starts where the base is,
and the model card pins the base by its files' hashes. Each rank draws its noise and timesteps from its own
generator (seeded by the run's seed and its rank); a validation batch draws from a generator seeded by its own
content, so every evaluation of a run scores the same noise and the losses it logs can be compared.
"""

from __future__ import annotations

from functools import cached_property

import torch

from aigc.workload import Loss, TrainingTask
from aigc.workloads.hf_diffusion.base import DEMO_PREFIX, DENOISER, check_folder, fingerprint, local_folder
from aigc.workloads.hf_diffusion.denoising import denoising_loss, tokenize, trainable_unet
from aigc.workloads.image.training import ImageStore


class HFDiffusionTrainingTask(TrainingTask):
    def __init__(self, lake, index, cfg):
        from transformers import AutoTokenizer

        self.settings = s = cfg.workload.settings
        self.folder = local_folder(s.base_model_uri, s.demo_architecture, getattr(lake, "options", None))
        self.pipeline = check_folder(self.folder)["_class_name"]
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder / "tokenizer"), local_files_only=True,
                                                       trust_remote_code=False)
        self.captions = index.columns["caption"]
        self.store = ImageStore(lake, index, s.resolution, cfg.train.cache_bytes)
        self.seed = cfg.train.seed
        self.model, self.frozen, self._draws = None, None, None

    def build_model(self):
        s = self.settings
        self.model, self.frozen = trainable_unet(self.folder, s.finetune, s.lora_rank, s.lora_alpha)
        return self.model

    def batch(self, samples):
        ids = tokenize(self.tokenizer, [self.captions[int(i)] for i in samples])
        return self.store.images(samples).mul_(2).sub_(1), ids

    def loss(self, model, batch, *, train):
        pixels, ids = batch
        self.frozen.to(pixels.device)  # (where it already is after the first batch)
        if train:
            if self._draws is None:
                rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
                self._draws = torch.Generator().manual_seed(self.seed * 1009 + rank)
            draws, dropout = self._draws, self.settings.caption_dropout
        else:
            draws, dropout = torch.Generator().manual_seed(int(ids.sum()) % (1 << 31)), 0.0
        return Loss(denoising_loss(model, self.frozen, pixels, ids, draws, dropout))

    def weights(self, model):
        if self.settings.finetune != "lora":
            return model.state_dict()
        import copy

        # The base UNet's own names (what loading it as a UNet reads): the adapters fused into a copy of the weights.
        fused = copy.deepcopy(model)
        fused.fuse_lora()
        fused.unload_lora()
        return fused.state_dict()

    @cached_property
    def base(self) -> dict:
        """The base's fingerprint (its files' hashes: the weights read once, when the card or a warm start needs it)."""
        return fingerprint(self.folder)

    def card(self):
        s = self.settings
        return {"diffusion": {"base_uri": s.base_model_uri or f"{DEMO_PREFIX}{s.demo_architecture}",
                              "base": self.base, "pipeline": self.pipeline, "resolution": s.resolution,
                              "finetune": s.finetune, "inference_steps": s.inference_steps,
                              "guidance_scale": s.guidance_scale}}

    def files(self):
        # The UNet's config beside its weights: the run's folder (and the registry's version) loads with
        # UNet2DConditionModel.from_pretrained as it is.
        return {"config.json": (self.folder / DENOISER / "config.json").read_bytes()}

    def adopt(self, card):
        # A version of the same base (by its files' hashes) continues; another base's UNet is another model.
        theirs = (card.get("diffusion") or {}).get("base", {}).get("sha256")
        if theirs != self.base["sha256"]:
            return f"it was fine-tuned from another base (sha256 {theirs}, not {self.base['sha256']})"
        return None

    def stats(self):
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad) if self.model else None
        return {"decoded_shards": self.store.decoded_shards, "base_sha256": self.base["sha256"],
                "pipeline": self.pipeline, "finetune": self.settings.finetune, "trainable_parameters": trainable}
