"""``Generator``: a registry version + variant, loaded safely, with a batched ``generate``."""

from __future__ import annotations

import torch
from safetensors.torch import load as load_safetensors

from aigc.config import ModelConfig
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.models import ConditionalVAE, Vocab
from aigc.models.cvae import latents_for_seeds
from aigc.registry import variants
from aigc.registry.safeload import check_weights
from aigc.registry.store import Registry, VersionNotFound

CARD = "model.json"


def build_model(card: dict) -> tuple[ConditionalVAE, Vocab]:
    vocab = Vocab.from_dict(card["vocab"])
    return ConditionalVAE(len(vocab), ModelConfig(**card["model"])), vocab


def variant_key(version_prefix: str, variant: str) -> str:
    if variant == "fp32":
        return join(version_prefix, "model.safetensors")
    return join(version_prefix, "variants", variant, "weights.safetensors")


class Generator:
    """Captions + seeds → images, from one model version and variant, on CPU or GPU."""

    def __init__(self, model: ConditionalVAE, vocab: Vocab, *, version: str, variant: str,
                 device: torch.device, dtype: torch.dtype):
        self.model = model.to(device=device, dtype=dtype).eval()
        self.vocab, self.version, self.variant, self.device, self.dtype = vocab, version, variant, device, dtype
        self.config = model.cfg

    @classmethod
    def load(cls, lake: Lake, name: str, ref: str = "production", variant: str = "fp32",
             device: str | torch.device = "cpu") -> Generator:
        """``ref``: a version (``v0003``) or an alias; the weights' hash is checked against the record."""
        registry = Registry(lake, name)
        record = registry.get(ref)
        prefix = registry.version_prefix(record["version"])
        built = record.get("variants", {})
        if variant != "fp32" and variant not in built:
            raise VersionNotFound(f"{name} {record['version']} has no {variant!r} variant; it has "
                                  f"{sorted({'fp32', *built})} (build them with `aigc deploy --version`)")
        key = variant_key(prefix, variant)
        expected = built[variant]["weights_sha256"] if variant in built else record["weights_sha256"]
        data = lake.get_bytes(key)
        check_weights(data, expected, lake.url(key))
        model, vocab = build_model(lake.get_json(join(prefix, CARD)))
        state, dtype = variants.decode(variant, load_safetensors(data))
        model.load_state_dict(state)
        return cls(model, vocab, version=record["version"], variant=variant, device=torch.device(device), dtype=dtype)

    @torch.no_grad()
    def generate(self, prompts: list[str], seeds: list[int]) -> torch.Tensor:
        """(B, R, R, 3) uint8 images; the same (prompt, seed) gives the same image in any batch."""
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds: one seed per prompt")
        ids = self.vocab.encode(prompts, self.config.max_tokens).to(self.device)
        z = latents_for_seeds(seeds, self.config.latent_dim).to(self.device, self.dtype)
        images = self.model.generate(ids, z).float().clamp(0, 1)  # (B, 3, R, R)
        return (images * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu()
