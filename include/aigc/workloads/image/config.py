"""The image workload's own settings (``cfg.workload.settings`` when the workload is ``image``): the images' size
and the limits stage 1 checks them against, the conditional VAE's shape, and the bounds of its gates that only
images have (agreement of a variant's pixels with fp32's, blank images, the checker and the Fréchet distance)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from aigc.config import check_order, check_range, where_to_set

if TYPE_CHECKING:
    from aigc.config import PipelineConfig

RESOLUTIONS = (32, 64, 128, 256)
"""Sides the CVAE is built for (its levels halve the side down to 4 px) and the synthetic drop renders."""


@dataclass(frozen=True)
class ImageSettings:
    """Captions → square RGB images: a conditional VAE (``aigc.workloads.image.cvae``), judged by a pixel checker."""

    workload: ClassVar[str] = "image"
    """Whose settings these are: error messages name the flags and the form field that set them."""
    gate_bounds: ClassVar[tuple[str, ...]] = ("max_pixel_mae", "min_image_std", "blank_std", "checker_images",
                                              "reference_seeds", "min_checker_accuracy", "expected_checker_accuracy",
                                              "max_fid")
    """Settings that only judge a run (``Workload.settings``: a resumed run does not compare them)."""

    # Stage 1: the drop's captions and images, and the curated ones.
    min_caption_chars: int = 3
    max_caption_chars: int = 512
    """Captions are quarantined, not truncated, past this: cutting changes their meaning."""
    resolution: int = 32
    """Side of the curated images and of the generated ones, in pixels: other sizes within the limits below are
    resized to it, and the synthetic drop renders at it."""
    min_side: int = 8
    """Images with a side below this are quarantined (``image_too_small``)."""
    max_side: int = 4096
    """Images with a side above this are quarantined (``image_too_large``)."""
    max_image_pixels: int = 16_777_216
    """Decompression-bomb guard: width × height above this is refused before decoding."""
    max_image_bytes: int = 8 * 1024 * 1024
    """Encoded images larger than this are refused before decoding."""
    near_dup_image_distance: float = 6.0
    """Near-duplicate captions are near-duplicate records only if no cell of their images' 8×8 RGB thumbnails
    differs by more (0–255)."""

    # Stage 2: the conditional VAE.
    channels: int = 16
    """Width of the first conv level; each level down doubles it (up to 8×). 16 trains ~3× faster than 32 on 2 CPU
    cores."""
    latent_dim: int = 16
    text_dim: int = 64
    max_tokens: int = 16
    """Caption words the encoder reads; longer captions are cut."""
    kl_weight: float = 1.0

    # Gates 3 and 4.
    max_pixel_mae: float = 6.0
    """Gate 3: a variant's mean absolute difference from the fp32 images on the smoke prompts, in 0–255 levels."""
    min_image_std: float = 2.0
    """Gate 3: a variant's images must not be flat: the mean per-image standard deviation of pixel values (0–255)."""
    blank_std: float = 2.0
    """Gate 4: a generated image whose pixel standard deviation is below this is blank (``generate_gate``'s
    max_blank_fraction bounds their share)."""

    # Stage 5: the checker and the Fréchet distance.
    checker_images: int = 512
    """Real images of the day the checker is also scored on (the curated validation split first; the Fréchet
    distance reads only those): 512 read right put the interval's lower end at 0.993."""
    reference_seeds: int = 4
    """Renderings of every attribute combination (648 each) in the checker's fixed reference set: 4 → 2 592 scenes,
    the same every day, so the checker's accuracy is a property of the checker."""
    min_checker_accuracy: float = 0.97
    """Gate 5: the checker's own all-attributes accuracy, on its reference set and on the day's real images: below
    it, alignment means little. Passes only when the interval's lower end clears it (a checker that reads 0.999 of
    512 images right passes with probability > 0.999; 0.99 would need more than 380 images read without a miss)."""
    expected_checker_accuracy: float = 0.998
    """The accuracy the checker usually has (0.9992 on its 2,592 reference scenes): the false-failure rate its two
    checks report is that of a checker this good (``aigc.evaluate.stats.design``)."""
    max_fid: float = 0.25
    """Gate 5: Fréchet distance between real and generated checker features (not Inception-FID): about 0.03 between
    two halves of real images, far below it for a trained model, several units for noise images."""

    def __post_init__(self) -> None:
        check_range(self, "min_caption_chars", 1, 100_000)
        check_range(self, "max_caption_chars", 1, 100_000)
        check_order(self, "min_caption_chars", "max_caption_chars")
        if self.resolution not in RESOLUTIONS:
            raise ValueError(f"ImageSettings.resolution must be one of {RESOLUTIONS}, got {self.resolution!r}"
                             f"{where_to_set(self, 'resolution')}")
        check_range(self, "min_side", 1, 65_536)
        check_range(self, "max_side", 1, 65_536)
        check_order(self, "min_side", "max_side")
        check_range(self, "max_image_pixels", 1, 1 << 31)
        check_range(self, "max_image_bytes", 1, 1 << 31)
        check_range(self, "near_dup_image_distance", 0.0, 255.0)
        check_range(self, "channels", 4, 512)
        check_range(self, "latent_dim", 1, 1024)
        check_range(self, "text_dim", 8, 1024)
        if self.text_dim % 4:
            raise ValueError(f"ImageSettings.text_dim must be a multiple of 4 (attention heads), got {self.text_dim}"
                             f"{where_to_set(self, 'text_dim')}")
        check_range(self, "max_tokens", 1, 512)
        check_range(self, "kl_weight", 0.0, 100.0)
        check_range(self, "max_pixel_mae", 0.0, 255.0)
        check_range(self, "min_image_std", 0.0, 255.0)
        check_range(self, "blank_std", 0.0, 255.0)
        check_range(self, "checker_images", 1, 1_000_000)
        check_range(self, "reference_seeds", 1, 100)
        check_range(self, "min_checker_accuracy", 0.0, 1.0)
        check_range(self, "expected_checker_accuracy", 0.0, 1.0)
        check_range(self, "max_fid", 0.0, 1e9)

    @property
    def shape(self) -> CVAEShape:
        """What building the model needs (and its card stores)."""
        return CVAEShape.of(dataclasses.asdict(self))


@dataclass(frozen=True)
class CVAEShape:
    """The conditional VAE's shape: what building it needs, stored as the model card's ``model`` (checked as
    ``ImageSettings`` when they were set)."""

    resolution: int = 32
    channels: int = 16
    latent_dim: int = 16
    text_dim: int = 64
    max_tokens: int = 16
    kl_weight: float = 1.0

    @classmethod
    def of(cls, fields: dict[str, Any]) -> CVAEShape:
        """The shape among ``fields`` (settings, or a card: one written before the settings moved here also names the
        model)."""
        return cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls) if f.name in fields})


def image_settings(cfg: PipelineConfig | None) -> ImageSettings:
    """The image settings of ``cfg``: the preset's, or their defaults in a configuration built without a preset (or
    none at all)."""
    own = cfg.workload.settings if cfg is not None else None
    return own if isinstance(own, ImageSettings) else ImageSettings()
