"""The ``hf-diffusion`` workload's stages 3 and 4: a registered version's UNet, in one of its variants, served in its
base pipeline by the pipeline's own call.

A version holds the fine-tuned UNet's weights (and its ``config.json``); the rest of the pipeline (text encoder,
tokenizer, autoencoder, scheduler) is the base's, read from the base's folder once its files are the ones the model
card pinned (a base replaced since would encode captions or decode latents otherwise). A variant is an encoding of
the UNet's weights and, where its name says so (``bf16-s20``, ``fp32-s8-dpm``: ``config.variant_names``), the
number of denoising steps and the scheduler it serves with; the version's own ``inference_steps`` and the base's
scheduler otherwise.

Every image has its own generator, seeded by its prompt's seed, so an image depends on its prompt, seed and settings,
not on what it is batched with (to a grey level: batched kernels may round otherwise).
"""

from __future__ import annotations

import inspect
import json
from itertools import groupby
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from safetensors.torch import load as load_safetensors

from aigc.config.variant_names import variant_parts
from aigc.registry import variants
from aigc.workload import Serving
from aigc.workloads.hf_diffusion.base import DENOISER, BaseModelError, in_layout, load_pipeline, local_folder
from aigc.workloads.hf_folder import file_hashes

SCHEDULERS = {"ddim": "DDIMScheduler", "euler": "EulerDiscreteScheduler", "dpm": "DPMSolverMultistepScheduler"}
"""A variant's scheduler name → the diffusers class built from the base scheduler's config (its betas, its
prediction type), as diffusers' docs swap schedulers."""


class Item(NamedTuple):
    """A prompt as the pipeline takes it: its words, seed, guidance and negative prompt."""

    prompt: str
    seed: int
    guidance: float
    negative: str


def base_folder_of(card: dict) -> Path:
    """The local folder of the base a version was fine-tuned from, once every file but the UNet's weights is the one
    the card pinned."""
    d = card["diffusion"]
    folder = local_folder(d["base_uri"])

    def compared(name: str) -> bool:  # the version brings its own UNet weights: the base's are neither read nor hashed
        return in_layout(name) and not (name.startswith(f"{DENOISER}/") and name.endswith(".safetensors"))

    now, pinned = file_hashes(folder, compared, depth=2), d["base"]["files"]
    changed = sorted(n for n in pinned if compared(n) and now.get(n) != pinned[n])
    if changed:
        raise BaseModelError(f"the base at {d['base_uri']} is not the one this version was trained from: its "
                             f"{changed[:5]} changed since (sha256 differs from the model card's); restore it, or "
                             "train again")
    return folder


def swapped(scheduler, name: str):
    """The scheduler class ``name`` built from ``scheduler``'s config, as diffusers' docs swap them, keeping a
    pixel-space base's clipping of its predicted clean image: DDIM reads ``clip_sample`` as DDPM does; DPM-Solver
    clips by thresholding (at the clipping range: every prediction inside it), without which a pixel-space model's
    early predictions, far outside [-1, 1], come out as noise."""
    import diffusers

    cls = getattr(diffusers, name)
    config, clipping = scheduler.config, {}
    takes = inspect.signature(cls.__init__).parameters
    if config.get("clip_sample") and "clip_sample" not in takes and "thresholding" in takes:
        # as arguments: from_config resets what the base's config left at its defaults (thresholding among them)
        clipping = {"thresholding": True, "dynamic_thresholding_ratio": 1.0,
                    "sample_max_value": float(config.get("clip_sample_range", 1.0))}
    return cls.from_config(config, **clipping)


def version_unet(folder: Path, state: dict[str, torch.Tensor], dtype: torch.dtype, what: str):
    """The base's UNet class and config holding a version's weights (``state``), built without weights of its own
    (the base's are never read: a Stable Diffusion UNet is gigabytes) and given the version's tensors as they are."""
    import diffusers
    from accelerate import init_empty_weights

    cls = getattr(diffusers, json.loads((folder / "model_index.json").read_text())[DENOISER][1])
    with init_empty_weights():
        unet = cls.from_config(cls.load_config(str(folder / DENOISER)))
    missing, unexpected = unet.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise BaseModelError(f"{what}: its UNet weights do not fit the base's UNet (missing {sorted(missing)[:5]}, "
                             f"unexpected {sorted(unexpected)[:5]})")
    if unet.dtype != dtype:  # (the variant's tensors came in its precision: a cast only where they did not)
        unet = unet.to(dtype)
    return unet.eval()


class DiffusionServing(Serving):
    """Prompts → images (B, R, R, 3) uint8 at the version's resolution, by the base pipeline's call with this
    variant's UNet weights, precision, steps and scheduler."""

    def __init__(self, card: dict, variant: str, data: bytes, device: torch.device, version: str):
        d = card["diffusion"]
        encoding, steps, scheduler = variant_parts(variant)
        state, dtype = variants.decode(encoding, load_safetensors(data))
        folder = base_folder_of(card)
        unet = version_unet(folder, state, dtype, f"version {version} {variant}")
        self.pipe = load_pipeline(folder, dtype, unet=unet)
        if scheduler:
            self.pipe.scheduler = swapped(self.pipe.scheduler, SCHEDULERS[scheduler])
        self.pipe.to(device)
        self.resolution, self.guidance = int(d["resolution"]), float(d["guidance_scale"])
        self.steps = steps or int(d["inference_steps"])
        self.scheduler = type(self.pipe.scheduler).__name__
        # IF's pipeline would clean captions with ftfy and BeautifulSoup (absent: a warning per call); stage 1 has
        # normalised them, and a prompt file's words are served as they are.
        self.options = {"clean_caption": False} if "clean_caption" in inspect.signature(self.pipe.__call__).parameters \
            else {}
        self.version, self.variant, self.device, self.dtype = version, variant, device, dtype

    def item(self, prompt: dict) -> Item:
        """A prompt-file line's item: its options (``guidance_scale``, ``negative_prompt``), else the version's."""
        o = prompt.get("options") or {}
        return Item(prompt["prompt"], int(prompt["seed"]), float(o.get("guidance_scale", self.guidance)),
                    str(o.get("negative_prompt", "")))

    def cache_key(self, prompt: dict) -> list:
        it = self.item(prompt)
        return [it.prompt, it.seed, it.guidance, it.negative, self.resolution, self.steps, self.scheduler]

    @torch.no_grad()
    def run(self, items: list[Item]) -> np.ndarray:
        """(B, R, R, 3) uint8: one pipeline call per guidance scale among the items (the pipeline takes one scale a
        call), in the items' order."""
        out: list[np.ndarray | None] = [None] * len(items)
        order = sorted(range(len(items)), key=lambda i: items[i].guidance)
        for guidance, group in groupby(order, key=lambda i: items[i].guidance):
            rows = list(group)
            negatives = [items[i].negative for i in rows]
            images = self.pipe(
                prompt=[items[i].prompt for i in rows],
                negative_prompt=negatives if any(negatives) else None,
                num_inference_steps=self.steps, guidance_scale=guidance,
                generator=[torch.Generator().manual_seed(items[i].seed) for i in rows],
                height=self.resolution, width=self.resolution, output_type="np", return_dict=False,
                **self.options)[0]
            for i, image in zip(rows, images, strict=True):
                out[i] = (np.clip(image, 0, 1) * 255).round().astype(np.uint8)
        return np.stack(out)

    def generate(self, prompts, seeds):
        """(B, R, R, 3) uint8 images at the version's guidance: what gate 3 compares and times, and stage 5 judges."""
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds: one seed per prompt")
        return torch.from_numpy(self.run([Item(p, int(s), self.guidance, "") for p, s in zip(prompts, seeds,
                                                                                             strict=True)]))

    def memory(self):
        """The batcher's memory model of a batch of images, from the UNet's config, in the variant's element size:
        per image, the feature maps the down path keeps for the up path (each level's channels × positions × its
        layers and its output) and the largest transient on top, the self-attention scores of the widest attention
        level (heads × positions², as PyTorch's math attention materialises them) or a few feature maps; twice under
        classifier-free guidance; or, where it is larger, the autoencoder's decoding at full resolution. The weights
        are held whatever the batch. Re-fitted from measured peaks (``aigc.batching``): a memory-efficient attention
        kernel measures lower, and the batch grows."""
        from aigc.batching import MemoryModel

        c = self.pipe.unet.config
        side = int(c.sample_size if isinstance(c.sample_size, int) else max(c.sample_size))
        levels = len(c.block_out_channels)
        layers = _per_level(c.layers_per_block, levels)
        heads = _per_level(c.num_attention_heads or c.attention_head_dim, levels)  # diffusers' naming: head counts
        kept, transient = 0, 0
        for level, (channels, block) in enumerate(zip(c.block_out_channels, c.down_block_types, strict=True)):
            positions = (side // 2**level) ** 2
            kept += channels * positions * (layers[level] + 1)
            transient = max(transient, 4 * channels * positions)
            if "CrossAttn" in block:
                transient = max(transient, heads[level] * positions**2)
        per_image = (kept + transient) * (2 if self.guidance > 1 else 1)
        vae = getattr(self.pipe, "vae", None)
        if vae is not None:  # then the autoencoder decodes the batch at full resolution: its widest feature maps
            per_image = max(per_image, 8 * max(vae.config.block_out_channels) * self.resolution**2)
        weights = sum(p.numel() * p.element_size() for p in self.pipe.unet.parameters())
        return MemoryModel(width=max(1, int(per_image**0.5)), base_bytes=weights,
                           bytes_per_unit=float(torch.finfo(self.dtype).bits // 8))


def _per_level(value, levels: int) -> list[int]:
    """A UNet config's per-level setting: one number for every level, or one per level."""
    return [int(value)] * levels if isinstance(value, int) else [int(v) for v in value]


def shard_model(lake, plan: dict, workload):
    """Stage 4's model for the core's shard engine: prompts → PNGs by the plan's version and variant, cached as PNG
    bytes under the prompt's words, seed, guidance, negative prompt and the variant's resolution, steps and
    scheduler. Every image costs the same (one resolution): one bucket, whose learned batch size later shards of
    the run start from."""
    from PIL import Image

    from aigc.generate.engine import ShardModel, load_for_shard
    from aigc.workloads.world import png_bytes

    serving, device = load_for_shard(lake, plan, workload.serving)
    sized = {"width": serving.resolution, "height": serving.resolution}

    def finish(_item: Item, pixels: np.ndarray) -> tuple[dict, bytes]:
        png = png_bytes(Image.fromarray(pixels))
        return {"image": png, **sized}, png

    return ShardModel(device, run=serving.run, finish=finish, key=serving.cache_key,
                      prepare=lambda prompts: [serving.item(p) for p in prompts],
                      cached=lambda png: {"image": png, **sized}, length=lambda _item: 0,
                      memory=serving.memory(), suffix=".png", remember_sizes=True)
