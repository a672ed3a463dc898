"""The ``hf-diffusion`` workload's own settings (``cfg.workload.settings``): the image workload's (the drop's rules and
the curated resolution) and where the base pipeline is and how its UNet is fine-tuned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aigc.config import check_range
from aigc.workloads.image.config import ImageSettings

ARCHITECTURES = ("pixel", "latent")
"""The demo bases built from configs when no base is given (``demo_base``)."""
FINETUNE = ("full", "lora")


@dataclass(frozen=True)
class HFDiffusionSettings(ImageSettings):
    """A Hugging Face ``diffusers`` text-to-image pipeline, its UNet fine-tuned on captioned images."""

    workload: ClassVar[str] = "hf-diffusion"

    base_model_uri: str = ""
    """The pipeline to fine-tune: a folder, or a folder in the lake, saved with ``save_pretrained``
    (``model_index.json`` and a folder per component). Loaded with ``diffusers`` from there only: nothing is
    downloaded, no remote code runs. Empty: a small demo pipeline built from configs with random weights
    (``demo_architecture``)."""
    demo_architecture: str = "pixel"
    """The demo base when ``base_model_uri`` is empty: ``pixel`` (IFPipeline) or ``latent``
    (StableDiffusionPipeline)."""
    finetune: str = "full"
    """``full``: every weight of the UNet trains; ``lora``: low-rank adapters (``peft``) on its attention projections
    train and the rest stays as the base has it."""
    lora_rank: int = 8
    lora_alpha: float = 16.0
    caption_dropout: float = 0.1
    """The share of training captions replaced by the empty caption, so the model learns the unconditional
    prediction that classifier-free guidance subtracts when it serves."""

    inference_steps: int = 50
    """Denoising steps the version serves with, with the base's scheduler: the reference every variant with fewer
    steps or another scheduler (``bf16-s20``, ``fp32-s8-dpm``) is compared with at gate 3 and on the front."""
    guidance_scale: float = 5.0
    """Classifier-free guidance (1: none, half the UNet's work); a prompt-file line may set its own."""
    max_pixel_mae: float = 48.0
    """Gate 3: a variant's mean absolute difference from the reference's images on the smoke prompts (0-255 levels).
    Fewer steps or another scheduler draw another image from the same noise, so the bound catches a broken variant
    (a noise image is ~80 from a picture), not a cheaper one: stage 5 judges those on the front."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self, "inference_steps", 1, 1000)
        check_range(self, "guidance_scale", 0.0, 100.0)
        if not isinstance(self.base_model_uri, str) or len(self.base_model_uri) > 1000:
            raise ValueError(f"HFDiffusionSettings.base_model_uri must be a folder or lake URI (a string of at most "
                             f"1000 characters), got {self.base_model_uri!r}")
        if self.demo_architecture not in ARCHITECTURES:
            raise ValueError(f"HFDiffusionSettings.demo_architecture must be one of {list(ARCHITECTURES)}, got "
                             f"{self.demo_architecture!r}")
        if self.finetune not in FINETUNE:
            raise ValueError(f"HFDiffusionSettings.finetune must be one of {list(FINETUNE)}, got {self.finetune!r}")
        check_range(self, "lora_rank", 1, 4096)
        check_range(self, "lora_alpha", 1e-3, 1e6)
        check_range(self, "caption_dropout", 0.0, 1.0)
