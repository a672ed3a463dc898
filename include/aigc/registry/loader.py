"""A registry version's variant, loaded safely (hash and format checked against its record) by its workload."""

from __future__ import annotations

from collections.abc import Callable

import torch

from aigc.config.variant_names import AUTO, encoding_of
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.registry import variants
from aigc.registry.safeload import check_onnx, check_weights
from aigc.registry.store import Registry, VersionNotFound

CARD = "model.json"


def variant_key(version_prefix: str, variant: str) -> str:
    """Where a variant's weights are: its encoding's (``bf16-s20`` reads ``bf16``'s; fp32's are the version's)."""
    variant = encoding_of(variant)
    if variant == "fp32":
        return join(version_prefix, "model.safetensors")
    name = "model.onnx" if variant in variants.ONNX_KINDS else "weights.safetensors"
    return join(version_prefix, "variants", variant, name)


def serving_device(variant: str, device: torch.device) -> torch.device:
    """Where ``variant`` runs when the worker's device is ``device``: torch variants there; ONNX ones (onnxruntime)
    on the GPU only with onnxruntime's CUDA provider (onnxruntime-gpu), else on the CPU, which is then what their
    batch budget and their latency are measured on; int8dyn (PyTorch's dynamically quantized linear layers, whose
    kernels are the CPU's) on the CPU."""
    if variant in variants.CPU_KINDS:
        return torch.device("cpu")
    if variant in variants.ONNX_KINDS and device.type == "cuda":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return torch.device("cpu")
    return device


def served_variant(asked: str, eligible: list[str], device: torch.device,
                   gpu_ms: dict[str, float] | None = None, by_device: dict[str, dict] | None = None) -> str:
    """The variant a shard serves when ``generate.variant`` is ``asked`` and gate 3 passed ``eligible``: ``asked``
    itself, or for ``auto`` the variant stage 5 recommended for this device's class (``by_device``:
    ``recommended_by_device``; ``recommended_for``), else on a CUDA device the fastest of the eligible variants
    gate 3 timed on a GPU (``gpu_ms``: ``timed_on_gpu``), else bf16 on a CUDA device (native there: half fp32's
    memory, so twice the batch, on the tensor cores) where gate 3 passed it, else fp32 (bf16 on a CPU is emulated
    by most, and slower than fp32)."""
    if asked != AUTO:
        return asked
    from aigc.devices import device_class

    if by_device and (recommended := recommended_for(by_device, device_class(str(device)), eligible)):
        return recommended
    if device.type == "cuda" and gpu_ms:
        return min(gpu_ms, key=lambda v: (gpu_ms[v], v))
    return "bf16" if device.type == "cuda" and "bf16" in eligible else "fp32"


def recommended_for(by_device: dict[str, dict] | None, cls: str, eligible: list[str]) -> str | None:
    """The variant stage 5 recommended for the class ``cls`` (``recommended_by_device``), where gate 3 passed it;
    a CPU of another thread count reads a CPU's (a variant fastest on two threads is rarely beaten on sixteen by
    one that was slower; a GPU model's is its own)."""
    by_device = by_device or {}
    same = [cls] + sorted(c for c in by_device if cls.startswith("cpu-") and c.startswith("cpu-") and c != cls)
    for c in same:
        variant = (by_device.get(c) or {}).get("variant")
        if variant in eligible:
            return variant
    return None


def timed_on_gpu(record: dict, eligible: list[str]) -> dict[str, float]:
    """The eligible variants gate 3 timed on a GPU (``variant.json``'s device: the gpu queue's worker that built
    them) → their milliseconds per sample at its larger batch: what ``auto`` chooses from on a CUDA worker."""
    timed = {}
    for name in eligible:
        entry = (record.get("variants") or {}).get(name) or {}
        batch = entry.get("latency_batch")
        if str(entry.get("device", "")).startswith("cuda") and batch and f"latency_ms_b{batch}" in entry:
            timed[name] = float(entry[f"latency_ms_b{batch}"])
    return timed


def load_serving(lake: Lake, name: str, ref: str, variant: str, device: str | torch.device, serve: Callable):
    """A version's variant (``ref``: a version or an alias) loaded to generate by ``serve`` (a workload's
    ``serving``: card, variant, bytes, device, version → a ``Serving``), its bytes' hash and format checked against
    the registry's record first (safe loading: no pickle, no code)."""
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
    return serve(lake.get_json(join(prefix, CARD)), variant, data, torch.device(device), record["version"])
