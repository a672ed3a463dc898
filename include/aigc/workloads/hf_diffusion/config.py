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
JUDGES = ("auto", "checker", "clip")
UNSCORED = ("warn", "fail")


@dataclass(frozen=True)
class HFDiffusionSettings(ImageSettings):
    """A Hugging Face ``diffusers`` text-to-image pipeline, its UNet fine-tuned on captioned images."""

    workload: ClassVar[str] = "hf-diffusion"
    gate_bounds: ClassVar[tuple[str, ...]] = ImageSettings.gate_bounds + (
        "judge_by", "clip_model_uri", "clip_distractors", "clip_score_epsilon", "feature_model_uri", "max_feature_fid",
        "safety_model_uri", "unsafe_labels", "max_unsafe_probability", "unscored")

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

    # Stage 5's scorers that read no caption grammar: each a transformers folder of the user's (or a lake URI).
    judge_by: str = "auto"
    """What alignment is: ``checker`` (the shapes checker: captions in the project's grammar), ``clip`` (the CLIP
    verdict: an image closer to its own caption than to ``clip_distractors`` others), ``auto``: the checker where
    every curated caption of the day is in the grammar, CLIP otherwise."""
    clip_model_uri: str = ""
    """A CLIP-like model (``get_image_features``, ``get_text_features``) saved with its tokenizer and image
    processor: the CLIP score and the CLIP verdict. ``demo:clip``: the demo's, trained on the shapes world only."""
    clip_distractors: int = 9
    """Other captions an image's own must beat (chance: 1 / (this + 1))."""
    clip_score_epsilon: float = 1.0
    """The recommendation's second axis where a CLIP model is set: a configuration is recommended only when shown to
    lose less than this much mean CLIP score (100 · cos) against the configuration of the best (the upper end of the
    paired interval on the evaluation prompts)."""
    feature_model_uri: str = ""
    """An image model whose pooled features FID and KID compare (torchmetrics, against the day's held-out curated
    images); empty: the CLIP model's image features where one is set."""
    max_feature_fid: float = 0.0
    """Gate 5: the largest Fréchet distance on those features (its scale is the model's); 0: reported, not gated."""
    safety_model_uri: str = ""
    """An image classifier (``AutoModelForImageClassification``) reading every generated image for unsafe content."""
    unsafe_labels: str = "nsfw"
    """Its labels that mean unsafe, comma-separated (case ignored)."""
    max_unsafe_probability: float = 0.5
    """An image whose unsafe labels' probability is above this is unsafe; gate 5 allows none."""
    unscored: str = "warn"
    """A scorer not configured (no CLIP, no feature model, no safety classifier): ``warn`` (the report and gate 5
    say so, and the check passes) or ``fail`` (gate 5 fails until one is set). Never a score of 0."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, allowed in (("judge_by", JUDGES), ("unscored", UNSCORED), ("demo_architecture", ARCHITECTURES),
                              ("finetune", FINETUNE)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"HFDiffusionSettings.{name} must be one of {list(allowed)}, got "
                                 f"{getattr(self, name)!r}")
        check_range(self, "clip_distractors", 1, 1000)
        check_range(self, "clip_score_epsilon", 0.0, 100.0)
        check_range(self, "max_feature_fid", 0.0, 1e9)
        check_range(self, "max_unsafe_probability", 0.0, 1.0)
        check_range(self, "inference_steps", 1, 1000)
        check_range(self, "guidance_scale", 0.0, 100.0)
        for name in ("base_model_uri", "clip_model_uri", "feature_model_uri", "safety_model_uri", "unsafe_labels"):
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) > 1000:
                raise ValueError(f"HFDiffusionSettings.{name} must be a string of at most 1000 characters (a folder "
                                 f"or lake URI), got {value!r}")
        check_range(self, "lora_rank", 1, 4096)
        check_range(self, "lora_alpha", 1e-3, 1e6)
        check_range(self, "caption_dropout", 0.0, 1.0)
