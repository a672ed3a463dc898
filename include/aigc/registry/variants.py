"""Optimised variants of a version's weights, as tensors that safetensors can hold.

    fp32    the trained weights as they are (the baseline every variant is compared with)
    bf16    every floating tensor in bfloat16; the model runs in bf16: half the bytes
    int8    conv/linear weights quantized per output channel (symmetric, int8 + fp32 scale),
            de-quantized when loaded: a quarter of the bytes for those tensors, fp32 compute
    pruned  the smallest-magnitude conv/linear weights (a global ``sparsity`` fraction) set to
            zero, stored as the kept values plus a bit mask: fewer bytes, same dense compute

Encoding and decoding are pure functions of tensors; nothing here touches the lake.
"""

from __future__ import annotations

import numpy as np
import torch

KINDS = ("fp32", "bf16", "int8", "pruned")
COMPUTE = {
    "fp32": "fp32",
    "bf16": "bf16 (CPU kernels without native bf16 are slower than fp32)",
    "int8": "fp32: weight-only int8 storage, de-quantized at load (smaller, not faster)",
    "pruned": "fp32 dense: the zeros are stored compactly but not skipped (smaller, not faster)",
}
"""What each variant computes in: recorded beside its latency, so nobody reads a speed-up into it."""
_SCALE, _MASK, _SHAPE = ".__scale", ".__mask", ".__shape"


def _compressible(name: str, t: torch.Tensor) -> bool:
    """Conv and linear weights (≥ 2-D, not embeddings or norms): where the bytes and the FLOPs are."""
    return name.endswith(".weight") and t.ndim >= 2 and t.is_floating_point() and "tokens" not in name \
        and "positions" not in name


def encode(kind: str, state: dict[str, torch.Tensor], *, sparsity: float = 0.5) -> dict[str, torch.Tensor]:
    if kind == "fp32":
        return {k: v.float().contiguous() for k, v in state.items()}
    if kind == "bf16":
        return {k: (v.bfloat16() if v.is_floating_point() else v).contiguous() for k, v in state.items()}
    if kind == "int8":
        out = {}
        for k, v in state.items():
            if not _compressible(k, v):
                out[k] = v.contiguous()
                continue
            flat = v.float().reshape(v.shape[0], -1)  # (out_channels, fan_in)
            scale = flat.abs().amax(dim=1).clamp_min(1e-12) / 127.0
            out[k] = torch.round(flat / scale[:, None]).clamp(-127, 127).to(torch.int8).reshape(v.shape).contiguous()
            out[k + _SCALE] = scale.contiguous()
        return out
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
    raise ValueError(f"unknown variant {kind!r}; variants are {KINDS}")


def decode(kind: str, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.dtype]:
    """(state dict to load, dtype to run the model in)."""
    if kind in ("fp32", "bf16"):
        return dict(tensors), torch.bfloat16 if kind == "bf16" else torch.float32
    state = {}
    for k, v in tensors.items():
        if k.endswith((_SCALE, _MASK, _SHAPE)):
            continue
        if kind == "int8" and k + _SCALE in tensors:
            scale = tensors[k + _SCALE]
            state[k] = (v.float().reshape(v.shape[0], -1) * scale[:, None]).reshape(v.shape)
        elif kind == "pruned" and k + _MASK in tensors:
            shape = tuple(tensors[k + _SHAPE].tolist())
            n = int(np.prod(shape))
            keep = torch.from_numpy(np.unpackbits(tensors[k + _MASK].numpy(), count=n).astype(bool))
            dense = torch.zeros(n, dtype=torch.float32)
            dense[keep] = v
            state[k] = dense.reshape(shape)
        else:
            state[k] = v
    return state, torch.float32


def sparsity_of(state: dict[str, torch.Tensor]) -> float:
    """Fraction of zero conv/linear weights."""
    weights = [v for k, v in state.items() if _compressible(k, v)]
    total = sum(v.numel() for v in weights)
    return float(sum((v == 0).sum().item() for v in weights) / total) if total else 0.0
