"""Scorers that read no caption grammar, each a ``transformers`` model from a folder the user points at (or its copy
in a lake), checked and loaded as a base is (safetensors only, no code of its own, nothing downloaded):

* ``ClipScorer`` (``clip_model_uri``: a CLIP-like model with ``get_image_features`` and ``get_text_features``, its
  tokenizer and image processor): the **CLIP score** of an image and its caption, ``100 · max(cos, 0)`` of their
  embeddings (torchmetrics' definition; its ``CLIPScore`` reads the features as tensors, which ``transformers`` 5
  returns wrapped, so the same formula is computed here), and a **verdict** per image that needs no threshold:
  whether the image is closer to its own caption than to every one of ``distractors`` other captions of the same set
  (R-precision at 1; chance is ``1 / (distractors + 1)``), drawn from the evaluation's pool of captions by the
  image's seed. The verdicts are what gate 5's alignment and the front's
  paired intervals read.
* ``FeatureModel`` (``feature_model_uri``, or CLIP's image tower): an image model whose pooled output is the feature
  torchmetrics' ``FrechetInceptionDistance`` compares (its ``feature`` argument); the features of its pass are kept,
  so ``KernelInceptionDistance`` and the bootstrap interval of the Fréchet distance read the same ones.
* ``SafetyClassifier`` (``safety_model_uri``: an image classifier): the probability of the labels named unsafe
  (``unsafe_labels``) per image.

``DEMO_CLIP`` names the demo's CLIP (``demo_scorers``): a small one trained offline on the shapes world, plumbing
that measures colour and shape roughly, no substitute for a real CLIP.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from aigc.workloads.hf_folder import BaseModelError, checked_folder
from aigc.workloads.hf_lm.base import check_folder, in_layout

if TYPE_CHECKING:
    import torch

    from aigc.lake import S3Options

DEMO_CLIP = "demo:clip"
BATCH = 64
"""Images or captions a scorer reads at once."""


def scorer_folder(uri: str, what: str, s3: S3Options | None = None, *, tokenizer: bool = False) -> Path:
    """The checked local folder of a scorer's model ``uri`` (``what``: which setting names it, for messages)."""
    if uri == DEMO_CLIP:
        from aigc.workloads.hf_diffusion.demo_scorers import demo_clip_folder

        return demo_clip_folder()

    def check(folder: Path, where: str) -> dict:
        try:
            config = check_folder(folder, where, tokenizer=tokenizer)
        except BaseModelError as e:
            raise BaseModelError(f"{what}: {e}") from None
        if not (folder / "preprocessor_config.json").exists():
            raise BaseModelError(f"{what}: {where} has no preprocessor_config.json (the image processor's settings): "
                                 "save it beside the model, image_processor.save_pretrained(folder)")
        return config

    return checked_folder(uri, s3, in_layout, check)


def _load(folder: Path, auto: str):
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = getattr(transformers, auto).from_pretrained(str(folder), local_files_only=True, trust_remote_code=False,
                                                        use_safetensors=True, dtype=torch.float32)
    processor = transformers.AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)
    return model.eval(), processor


def _pooled(out) -> torch.Tensor:
    """A features call's tensor: ``transformers`` 5 wraps CLIP's projected features in ``pooler_output``."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    pooled = getattr(out, "pooler_output", None)
    return pooled if pooled is not None else out.last_hidden_state.mean(dim=1)


def _normalised(x: torch.Tensor) -> np.ndarray:
    x = x.double()
    return (x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)).numpy()


@dataclass(frozen=True)
class ClipReadings:
    """Per image: the CLIP score with its own caption, the verdict (closer to its own caption than to every
    distractor) and the margin (own similarity − the closest distractor's: the least certain first in review)."""

    scores: list[float]
    verdicts: list[bool]
    margins: list[float]


class ClipScorer:
    def __init__(self, folder: Path, distractors: int, seed: int = 0):
        model, self.processor = _load(folder, "AutoModel")
        if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
            raise BaseModelError(f"clip_model_uri: {folder} holds a {type(model).__name__}, which has no "
                                 "get_image_features and get_text_features: a CLIP-like model embeds both")
        from transformers import AutoTokenizer

        self.model = model
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        text = getattr(model.config, "text_config", model.config)
        self.max_tokens = int(getattr(text, "max_position_embeddings", 77))
        self.distractors, self.seed = distractors, seed

    def images(self, images: list[np.ndarray]) -> np.ndarray:
        """Unit image embeddings (N, d)."""
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(images), BATCH):
                pixels = self.processor(images=list(images[i:i + BATCH]), return_tensors="pt")["pixel_values"]
                out.append(_normalised(_pooled(self.model.get_image_features(pixel_values=pixels))))
        return np.concatenate(out) if out else np.zeros((0, 0))

    def texts(self, captions: list[str]) -> np.ndarray:
        """Unit caption embeddings (N, d), cut at the text model's length."""
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(captions), BATCH):
                t = self.tokenizer(list(captions[i:i + BATCH]), padding=True, truncation=True,
                                   max_length=self.max_tokens, return_tensors="pt")
                out.append(_normalised(_pooled(self.model.get_text_features(
                    input_ids=t["input_ids"], attention_mask=t["attention_mask"]))))
        return np.concatenate(out) if out else np.zeros((0, 0))

    def with_pool(self, captions: list[str]) -> ClipScorer:
        """Set the captions distractors are drawn from (the evaluation's own: the day's held-out curated ones), each
        embedded once."""
        from aigc.evaluate.metrics import NoScorer

        self.pool = sorted(set(captions))
        if len(self.pool) < 2:
            raise NoScorer(f"the CLIP verdict compares an image's own caption with others, and the evaluation has "
                           f"{len(self.pool)} distinct caption(s) to draw them from: curate a day with more")
        self.embedded = dict(zip(self.pool, self.texts(self.pool), strict=True))
        return self

    def read(self, images: list[np.ndarray], captions: list[str], seeds: list[int]) -> ClipReadings:
        """Every image against its caption and ``distractors`` other captions of the pool, drawn by the image's
        seed: the same prompt and seed meet the same distractors in any batch, look or configuration (the front's
        paired intervals need that)."""
        new = sorted(set(captions) - set(self.embedded))
        self.embedded.update(zip(new, self.texts(new), strict=True))
        image = self.images(images)
        scores, verdicts, margins = [], [], []
        for i, (caption, seed) in enumerate(zip(captions, seeds, strict=True)):
            own = float(image[i] @ self.embedded[caption])
            others = [c for c in self.pool if c != caption]
            rng = np.random.default_rng([self.seed, int(seed) % (1 << 63)])
            chosen = rng.choice(len(others), size=min(self.distractors, len(others)), replace=False)
            closest = max(float(image[i] @ self.embedded[others[j]]) for j in chosen)
            scores.append(100.0 * max(own, 0.0))
            verdicts.append(own > closest)
            margins.append(own - closest)
        return ClipReadings(scores, verdicts, margins)


def _feature_module(folder: Path, clip: bool):
    import torch

    model, processor = _load(folder, "AutoModel")

    class FeatureModel(torch.nn.Module):
        """(N, 3, H, W) uint8 images → (N, d) features, as torchmetrics' FID calls its ``feature``; the last pass's
        are kept (``last``): KID and the FID's interval read the same ones."""

        def __init__(self):
            super().__init__()
            self.model, self.last = model, None

        def forward(self, imgs: torch.Tensor) -> torch.Tensor:
            batches = []
            with torch.inference_mode():
                for i in range(0, len(imgs), BATCH):
                    chunk = list(imgs[i:i + BATCH].permute(0, 2, 3, 1).cpu().numpy())
                    pixels = processor(images=chunk, return_tensors="pt")["pixel_values"]
                    batches.append(_pooled(model.get_image_features(pixel_values=pixels) if clip
                                           else model(pixel_values=pixels)).float())
            self.last = torch.cat(batches).reshape(len(imgs), -1)
            return self.last

    module = FeatureModel()
    module.num_features = int(module(torch.zeros(1, 3, 32, 32, dtype=torch.uint8)).shape[-1])
    return module


class FeatureDistance:
    """Fréchet distance and KID (torchmetrics) between generated images and the held-out real ones, on an image
    model's features; the real side is read once."""

    def __init__(self, folder: Path, clip: bool, real: list[np.ndarray]):
        from torchmetrics.image.fid import FrechetInceptionDistance

        self.module = _feature_module(folder, clip)
        self.fid = FrechetInceptionDistance(feature=self.module, reset_real_features=False)
        self.real = self._update(real, True)

    def _update(self, images: list[np.ndarray], real: bool) -> np.ndarray:
        import torch

        tensor = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()
        self.fid.update(tensor, real=real)
        return self.module.last.double().numpy()

    def measure(self, images: list[np.ndarray], confidence: float) -> dict:
        """FID (torchmetrics') with a bootstrap interval on the same features, and KID's mean and spread over
        subsets (torchmetrics', subsets of the smaller set's size)."""
        import torch
        from torchmetrics.image.kid import KernelInceptionDistance

        from aigc.workloads.image.metrics import frechet_estimate

        self.fid.reset()
        fake = self._update(images, False)
        value = float(self.fid.compute())
        interval = frechet_estimate(self.real, fake, confidence).to_dict()
        # torchmetrics' figure (its float32 features, float64 sums) and the interval around the same features' own.
        interval.update(value=round(value, 5), lo=min(interval["lo"], value), hi=max(interval["hi"], value))
        size = min(len(self.real), len(fake))
        with warnings.catch_warnings(), torch.random.fork_rng():
            warnings.filterwarnings("ignore", message=".*will save all extracted features")  # a few hundred here
            torch.manual_seed(0)  # its subsets are drawn from torch's generator: the same figure on a re-run
            kid = KernelInceptionDistance(feature=torch.nn.Identity(), subsets=50, subset_size=size)
            kid.update(torch.from_numpy(self.real).float(), real=True)
            kid.update(torch.from_numpy(fake).float(), real=False)
            mean, spread = kid.compute()
        return {"fid": interval, "kid": {"mean": float(mean), "std": float(spread), "subset_size": size},
                "features": fake}


class SafetyClassifier:
    """An image classifier's probability of the unsafe labels per image (their softmax share; a multi-label model's
    largest sigmoid among them)."""

    def __init__(self, folder: Path, unsafe_labels: str):
        self.model, self.processor = _load(folder, "AutoModelForImageClassification")
        labels = {int(k): str(v) for k, v in self.model.config.id2label.items()}
        wanted = {w.strip().lower() for w in unsafe_labels.split(",") if w.strip()}
        self.unsafe = sorted(i for i, name in labels.items() if name.lower() in wanted)
        if not self.unsafe:
            raise BaseModelError(f"safety_model_uri: {folder}'s labels are {sorted(labels.values())}, none of which "
                                 f"is named in unsafe_labels ({unsafe_labels!r}): name the unsafe ones there")
        self.multi_label = self.model.config.problem_type == "multi_label_classification"

    def probabilities(self, images: list[np.ndarray]) -> list[float]:
        import torch

        out: list[float] = []
        with torch.inference_mode():
            for i in range(0, len(images), BATCH):
                pixels = self.processor(images=list(images[i:i + BATCH]), return_tensors="pt")["pixel_values"]
                logits = self.model(pixel_values=pixels).logits.double()
                p = torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=-1)
                picked = p[:, self.unsafe]
                out.extend((picked.max(dim=-1).values if self.multi_label else picked.sum(dim=-1)).tolist())
        return out

