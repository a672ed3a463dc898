"""Optimised variants of a version: torch weights that safetensors holds, and ONNX graphs.

    fp32    the trained weights as they are (the baseline every variant is compared with)
    bf16    every floating tensor in bfloat16; the model runs in bf16: half the bytes
    pruned  the smallest-magnitude conv/linear weights (a global ``sparsity`` fraction) set to
            zero, stored as the kept values plus a bit mask: fewer bytes, same dense compute
    int8dyn the linear layers' weights in int8 (symmetric, a scale per output row), served by PyTorch's dynamic
            quantization (activations quantized per batch at run time; CPU kernels only): a quarter of the bytes
    onnx    the generation graph exported to ONNX, run by ONNX Runtime in fp32
    int8    that graph with static INT8 quantization (QDQ, per-channel), calibrated on curated
            captions, run by ONNX Runtime's INT8 kernels: smaller and faster on a CPU

The torch encodings are pure functions of tensors; the ONNX ones live in onnx_export.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

ONNX_KINDS = ("onnx", "int8")
CPU_KINDS = ("int8dyn",)
"""Torch variants whose kernels are the CPU's: they serve on the CPU whatever the worker has."""
COMPUTE = {
    "fp32": "fp32 (torch)",
    "bf16": "bf16 (torch; CPU kernels without native bf16 are slower than fp32)",
    "pruned": "fp32 dense (torch): the zeros are stored compactly but not skipped (smaller, not faster)",
    "int8dyn": "int8 linear layers (PyTorch dynamic quantization, fbgemm/x86 CPU kernels), the rest fp32",
    "onnx": "fp32 (ONNX Runtime)",
    "int8": "int8 Conv/MatMul (ONNX Runtime QDQ, static post-training quantization)",
}
"""What each variant computes in: recorded beside its latency, so nobody reads a speed-up into it."""
_MASK, _SHAPE, _SCALE = ".__mask", ".__shape", ".__scale"


def _compressible(name: str, t: torch.Tensor) -> bool:
    """Conv and linear weights (≥ 2-D, not embeddings or norms): where the bytes and the FLOPs are."""
    return name.endswith(".weight") and t.ndim >= 2 and t.is_floating_point() and "tokens" not in name \
        and "positions" not in name


def unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict safetensors can save: on the CPU, contiguous, and no two entries on one storage (a model that
    ties its output layer to its input embeddings, as GPT-2 and many Llama-style models do, lists the same tensor
    twice; safetensors refuses that, so the second is a copy, and loading ties them again)."""
    out, seen = {}, set()
    for k, v in state.items():
        v = v.detach().cpu().contiguous()
        storage = v.untyped_storage().data_ptr()
        out[k] = v.clone() if storage in seen else v
        seen.add(storage)
    return out


def encode(kind: str, state: dict[str, torch.Tensor], *, sparsity: float = 0.5) -> dict[str, torch.Tensor]:
    """Tensors to save for a torch variant (fp32, bf16, pruned)."""
    if kind == "fp32":
        return unshared({k: v.float() for k, v in state.items()})
    if kind == "bf16":
        return {k: (v.bfloat16() if v.is_floating_point() else v).contiguous() for k, v in state.items()}
    if kind == "pruned":
        weights = {k: v for k, v in state.items() if _compressible(k, v)}
        magnitudes = torch.cat([v.abs().flatten().float() for v in weights.values()])
        k_drop = int(sparsity * magnitudes.numel())
        threshold = magnitudes.kthvalue(k_drop).values if k_drop > 0 else torch.tensor(-1.0)
        out = {k: v.contiguous() for k, v in state.items() if k not in weights}
        for k, v in weights.items():
            keep = v.abs() > threshold
            out[k] = v[keep].float().contiguous()  # (kept,) values in row-major order
            out[k + _MASK] = torch.from_numpy(np.packbits(keep.flatten().numpy()))
            out[k + _SHAPE] = torch.tensor(list(v.shape), dtype=torch.int64)
        return out
    if kind == "int8dyn":
        out = {}
        for k, v in state.items():
            if not _compressible(k, v):
                out[k] = v.contiguous()
                continue
            rows = v.detach().float().reshape(v.shape[0], -1)
            scale = (rows.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
            out[k] = (rows / scale[:, None]).round().clamp(-127, 127).to(torch.int8).reshape(v.shape).contiguous()
            out[k + _SCALE] = scale.contiguous()
        return unshared(out)
    raise ValueError(f"{kind!r} is not a torch-weights variant; those are fp32, bf16, pruned, int8dyn")


def decode(kind: str, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.dtype]:
    """(state dict to load, dtype to run the model in)."""
    if kind in ("fp32", "bf16"):
        return dict(tensors), torch.bfloat16 if kind == "bf16" else torch.float32
    state = {}
    for k, v in tensors.items():
        if k.endswith((_MASK, _SHAPE, _SCALE)):
            continue
        if kind == "int8dyn" and k + _SCALE in tensors:  # the int8 values as fp32 (a model that is not swapped)
            scale = tensors[k + _SCALE].reshape(-1, *([1] * (v.ndim - 1)))
            state[k] = v.float() * scale
            continue
        if kind == "pruned" and k + _MASK in tensors:
            shape = tuple(tensors[k + _SHAPE].tolist())
            n = int(np.prod(shape))
            keep = torch.from_numpy(np.unpackbits(tensors[k + _MASK].numpy(), count=n).astype(bool))
            dense = torch.zeros(n, dtype=torch.float32)
            dense[keep] = v
            state[k] = dense.reshape(shape)
        else:
            state[k] = v
    return state, torch.float32


def swap_dynamic_int8(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> int:
    """Every ``nn.Linear`` of ``model`` whose weight an ``int8dyn`` variant holds becomes PyTorch's dynamically
    quantized linear with exactly those int8 values and row scales (not quantized again from fp32, which could round
    otherwise); → how many were swapped. CPU only: those kernels are fbgemm's / x86's."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    swapped = 0
    for name, module in list(model.named_modules()):
        key = f"{name}.weight"
        if type(module) is not torch.nn.Linear or key + _SCALE not in tensors:
            continue
        scale = tensors[key + _SCALE].double()
        with warnings.catch_warnings():  # deprecated in 2.13 (pytorch#184982), said once in docs/stages/deploy.md
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")
            weight = torch._make_per_channel_quantized_tensor(tensors[key].reshape(module.weight.shape), scale,
                                                              torch.zeros(len(scale), dtype=torch.long), 0)
        quantized = DynamicLinear(module.in_features, module.out_features, bias_=module.bias is not None,
                                  dtype=torch.qint8)
        quantized.set_weight_bias(weight, None if module.bias is None else module.bias.detach().float())
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent), attr, quantized)
        swapped += 1
    return swapped


def sparsity_of(state: dict[str, torch.Tensor]) -> float:
    """Fraction of zero conv/linear weights."""
    weights = [v for k, v in state.items() if _compressible(k, v)]
    total = sum(v.numel() for v in weights)
    return float(sum((v == 0).sum().item() for v in weights) / total) if total else 0.0
