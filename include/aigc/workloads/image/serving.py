"""``Generator``: the image workload's serving object, a registry version + variant with a batched ``generate``."""

from __future__ import annotations

import torch
from safetensors.torch import load as load_safetensors

from aigc.lake import Lake
from aigc.registry import variants
from aigc.registry.loader import load_serving
from aigc.workloads.image.config import CVAEShape
from aigc.workloads.image.cvae import ConditionalVAE, latents_for_seeds
from aigc.workloads.image.tokenizer import Vocab


def build_model(card: dict) -> tuple[ConditionalVAE, Vocab]:
    vocab = Vocab.from_dict(card["vocab"])
    return ConditionalVAE(len(vocab), CVAEShape.of(card["model"])), vocab


def runner_for(card: dict, variant: str, data: bytes, device: torch.device):
    """(runner with ``generate(ids, z)``, vocab, model shape, dtype of the latents) from checked bytes."""
    cfg = CVAEShape.of(card["model"])
    vocab = Vocab.from_dict(card["vocab"])
    if variant in variants.ONNX_KINDS:
        from aigc.workloads.image.onnx_export import OnnxRunner

        return OnnxRunner(data, device=device), vocab, cfg, torch.float32
    model, _ = build_model(card)
    state, dtype = variants.decode(variant, load_safetensors(data))
    model.load_state_dict(state)
    return model.to(device=device, dtype=dtype).eval(), vocab, cfg, dtype


class Generator:
    """Captions + seeds → images, from one model version and variant, on CPU or GPU."""

    def __init__(self, runner, vocab: Vocab, config: CVAEShape, *, version: str, variant: str,
                 device: torch.device, dtype: torch.dtype):
        self.runner, self.vocab, self.config = runner, vocab, config
        self.version, self.variant, self.device, self.dtype = version, variant, device, dtype

    @classmethod
    def load(cls, lake: Lake, name: str, ref: str = "production", variant: str = "fp32",
             device: str | torch.device = "cpu") -> Generator:
        """``ref``: a version (``v0003``) or an alias; the bytes' hash is checked against the record."""
        return load_serving(lake, name, ref, variant, device, serve)

    @torch.no_grad()
    def generate(self, prompts: list[str], seeds: list[int]) -> torch.Tensor:
        """(B, R, R, 3) uint8 images; the same (prompt, seed) gives the same image in any batch (to one grey
        level: on some CPUs the convolution kernels depend on the batch, and a float sum may round the other way)."""
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds: one seed per prompt")
        ids = self.vocab.encode(prompts, self.config.max_tokens).to(self.device)
        z = latents_for_seeds(seeds, self.config.latent_dim).to(self.device, self.dtype)
        images = self.runner.generate(ids, z).float().clamp(0, 1)  # (B, 3, R, R)
        return (images * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu()


def serve(card: dict, variant: str, data: bytes, device: torch.device, version: str) -> Generator:
    """A version's checked bytes as a ``Generator`` (the image workload's ``serving`` hook)."""
    runner, vocab, model_cfg, dtype = runner_for(card, variant, data, device)
    return Generator(runner, vocab, model_cfg, version=version, variant=variant, device=device, dtype=dtype)


def shard_model(lake: Lake, plan: dict):
    """Stage 4's model for the core's shard engine: captions + seeds → PNGs, cached as PNG bytes.

    What drives this model's memory and time is the image size, the same for every prompt (not its words: captions
    are padded to one length): one bucket, whose learned batch size the run's later shards start from."""
    import math

    from PIL import Image

    from aigc.batching import MemoryModel
    from aigc.generate.engine import ShardModel, load_for_shard
    from aigc.workloads.world import png_bytes

    gen, device = load_for_shard(lake, plan, serve)
    r, c = gen.config.resolution, gen.config.channels
    sized = {"width": r, "height": r}

    def run(prompts: list[dict]):
        return gen.generate([p["prompt"] for p in prompts], [p["seed"] for p in prompts]).numpy()

    def finish(_prompt: dict, pixels) -> tuple[dict, bytes]:
        png = png_bytes(Image.fromarray(pixels))
        return {"image": png, **sized}, png

    # d² ≈ activation elements per image (a few feature maps of channels × R²); calibrated on GPUs.
    return ShardModel(device, run=run, finish=finish, key=lambda p: [p["prompt"], p["seed"], r],
                      cached=lambda png: {"image": png, **sized}, length=lambda _p: r,
                      memory=MemoryModel(width=int(math.sqrt(8 * c * r * r)), base_bytes=0), suffix=".png",
                      remember_sizes=True)
