"""The ``hf-diffusion`` workload (issue 42, being built): a Hugging Face ``diffusers`` text-to-image pipeline of the
user's, its UNet fine-tuned on captioned images and served through the same stages as the demos.

Its base is a pipeline folder saved with ``save_pretrained`` (``HFDiffusionSettings.base_model_uri``: a folder or a
lake URI; empty: a small demo pipeline built from configs, with random weights), found, checked and loaded without
running its code or downloading anything (``base``). Stage 1 curates the image workload's drops at the configured
resolution (its rules, inherited); stage 2 fine-tunes the UNet by the denoising objective the base's scheduler
names, every weight or LoRA adapters, under the DDP core (``training``, ``denoising``). Stages 3 to 5 are not built
yet: the workload refuses them by name. Until they are, it is not among the built-in names; run it by its path,
``--workload aigc.workloads.hf_diffusion:HF_DIFFUSION``.
"""

from __future__ import annotations

from aigc.workloads.hf_diffusion.config import HFDiffusionSettings
from aigc.workloads.image import ImageWorkload


class HFDiffusionWorkload(ImageWorkload):
    name = "hf-diffusion"
    settings_class = HFDiffusionSettings
    description = "a Hugging Face diffusers pipeline of yours (a save_pretrained folder), fine-tuned on captions"
    stages = frozenset({"prepare", "train"})
    loss_parts = ()
    loss_title = "fine-tuning: denoising mean squared error"
    _train = ("base_model_uri", "demo_architecture", "finetune", "lora_rank", "lora_alpha", "caption_dropout",
              "resolution")
    cli_settings = {"make-raw": ("resolution",),
                    "prepare": ("resolution", "min_caption_chars", "max_caption_chars", "min_side", "max_side",
                                "max_image_pixels", "max_image_bytes", "near_dup_image_distance"),
                    "train": _train}
    preload_modules = tuple(f"aigc.workloads.{m}" for m in (
        "image.rawdrop", "image.records", "hf_diffusion.training", "hf_diffusion.denoising"))

    def config_overrides(self, preset):
        changes = super().config_overrides(preset)
        changes["model"] = {"name": "hf-diffusion"}
        # The denoising loss of a prediction of zero is 1 (the noise's variance): below it, the UNet learnt to
        # predict some of the noise. A demo base starts from random weights, above it.
        changes["train_gate"] = {"max_final_val_loss": 1.0}
        changes["train"] = {"batch_size": 16, "lr": 1e-3, "warmup_steps": 10}
        if preset == "smoke":
            changes["train"].update({"steps": 20, "eval_every": 10, "checkpoint_every": 10})
        return changes

    def training_task(self, lake, index, cfg):
        from aigc.workloads.hf_diffusion.training import HFDiffusionTrainingTask

        return HFDiffusionTrainingTask(lake, index, cfg)


HF_DIFFUSION = HFDiffusionWorkload()
