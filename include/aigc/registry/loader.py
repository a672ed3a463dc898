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
from aigc.registry.safeload import check_onnx, check_weights
from aigc.registry.store import Registry, VersionNotFound

CARD = "model.json"


def build_model(card: dict) -> tuple[ConditionalVAE, Vocab]:
    vocab = Vocab.from_dict(card["vocab"])
    return ConditionalVAE(len(vocab), ModelConfig(**card["model"])), vocab


def variant_key(version_prefix: str, variant: str) -> str:
    if variant == "fp32":
        return join(version_prefix, "model.safetensors")
    name = "model.onnx" if variant in variants.ONNX_KINDS else "weights.safetensors"
    return join(version_prefix, "variants", variant, name)


def serving_device(variant: str, device: torch.device) -> torch.device:
    """Where ``variant`` runs when the worker's device is ``device``: torch variants there; ONNX ones (onnxruntime)
    on the GPU only with onnxruntime's CUDA provider (onnxruntime-gpu), else on the CPU, which is then what their
    batch budget and their latency are measured on."""
    if variant in variants.ONNX_KINDS and device.type == "cuda":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return torch.device("cpu")
    return device


def runner_for(card: dict, variant: str, data: bytes, device: torch.device):
    """(runner with ``generate(ids, z)``, vocab, model config, dtype of the latents) from checked bytes."""
    cfg = ModelConfig(**card["model"])
    vocab = Vocab.from_dict(card["vocab"])
    if variant in variants.ONNX_KINDS:
        from aigc.registry.onnx_export import OnnxRunner

        return OnnxRunner(data, device=device), vocab, cfg, torch.float32
    model, _ = build_model(card)
    state, dtype = variants.decode(variant, load_safetensors(data))
    model.load_state_dict(state)
    return model.to(device=device, dtype=dtype).eval(), vocab, cfg, dtype


def load_serving(lake: Lake, name: str, ref: str, variant: str, device: str | torch.device, workload):
    """A version's variant (``ref``: a version or an alias) loaded by ``workload`` to generate, its bytes' hash and
    format checked against the registry's record first (safe loading: no pickle, no code)."""
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
    (check_onnx if variant in variants.ONNX_KINDS else check_weights)(data, expected, lake.url(key))
    return workload.serving(lake.get_json(join(prefix, CARD)), variant, data, torch.device(device), record["version"])


class Generator:
    """Captions + seeds → images, from one model version and variant, on CPU or GPU."""

    def __init__(self, runner, vocab: Vocab, config: ModelConfig, *, version: str, variant: str,
                 device: torch.device, dtype: torch.dtype):
        self.runner, self.vocab, self.config = runner, vocab, config
        self.version, self.variant, self.device, self.dtype = version, variant, device, dtype

    @classmethod
    def load(cls, lake: Lake, name: str, ref: str = "production", variant: str = "fp32",
             device: str | torch.device = "cpu") -> Generator:
        """``ref``: a version (``v0003``) or an alias; the bytes' hash is checked against the record."""
        from aigc.workloads import load_workload

        return load_serving(lake, name, ref, variant, device, load_workload("image"))

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
