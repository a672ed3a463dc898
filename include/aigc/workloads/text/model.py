"""A small decoder-only transformer: pre-norm blocks, rotary positions, ``scaled_dot_product_attention``, and a
KV cache for decoding (each new token attends to the cached keys and values instead of recomputing them).

Memory when generating, per sequence of length L (prompt + new tokens): the cache holds
2 · layers · L · width values, and an attention kernel that materialises its scores holds
heads · L_q · L_k of them for one layer at a time; ``kv_cache_bytes`` and ``attention_bytes`` say so,
for the batcher's memory model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def rotary(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of ``x`` (B, H, T, D) by angles of ``positions`` ((T,), or (B, T): each row its own; RoPE,
    base 10 000). Attention scores then depend only on the distance between positions."""
    d = x.shape[-1]
    inv = 1.0 / (10_000 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    angles = positions.to(torch.float32)[..., None] * inv  # (T, D/2) or (B, T, D/2)
    if angles.dim() == 3:
        angles = angles[:, None]  # (B, 1, T, D/2): the same for every head
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class KVCache:
    """Keys and values of every layer for a batch of sequences, grown as tokens are decoded."""

    def __init__(self, layers: int):
        self.k: list[torch.Tensor | None] = [None] * layers
        self.v: list[torch.Tensor | None] = [None] * layers

    @property
    def length(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[-2]

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k[layer] is not None:
            k, v = torch.cat([self.k[layer], k], dim=-2), torch.cat([self.v[layer], v], dim=-2)
        self.k[layer], self.v[layer] = k, v
        return k, v


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width, bias=False), nn.Linear(width, width, bias=False)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None, layer: int,
                mask: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rotary(q, positions), rotary(k, positions)
        if cache is not None:
            k, v = cache.extend(layer, k, v)
        total = k.shape[-2]
        if mask is None and t > 1:  # causal over the new tokens; every cached key comes before them
            y = (F.scaled_dot_product_attention(q, k, v, is_causal=True) if total == t
                 else F.scaled_dot_product_attention(q, k, v, attn_mask=_causal(t, total, x.device)))
        else:  # one new token sees every key (or the caller's mask says which)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def _causal(t: int, total: int, device) -> torch.Tensor:
    """(t, total) bool: new token i (at position total − t + i) sees keys up to its own position."""
    return torch.ones(t, total, dtype=torch.bool, device=device).tril(total - t)


class TextLM(nn.Module):
    def __init__(self, vocab: int, layers: int, width: int, heads: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)  # untied: safetensors stores no shared tensors
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * layers) if name.endswith(("out.weight", "2.weight"))
                                                else 1.0))

    def forward(self, ids: torch.Tensor, *, start: int = 0, positions: torch.Tensor | None = None,
                cache: KVCache | None = None, mask: torch.Tensor | None = None,
                select: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) token ids at positions start … (or ``positions``, (B, T): each row its own) → (B, T, vocab)
        logits, or (B, 1, vocab) at the index ``select`` (B,) of each row: a prefill needs only its last real
        token's, and logits of every position of a long prompt would be the largest tensor of the batch.
        ``cache`` (decoding) is extended by the new tokens' keys and values; ``mask`` (B or 1, 1, T, T_total)
        bool overrides the causal mask."""
        if positions is None:
            positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.embed(ids)
        for i, block in enumerate(self.blocks):
            x = block(x, positions, cache, i, mask)
        if select is not None:
            x = x[torch.arange(x.shape[0], device=x.device), select][:, None]
        return self.head(self.norm(x))

    @property
    def layers(self) -> int:
        return len(self.blocks)

    @property
    def width(self) -> int:
        return self.embed.embedding_dim


def kv_cache_bytes(layers: int, width: int, tokens: int, dtype_bytes: int = 4) -> int:
    """What one sequence's cache holds at ``tokens`` tokens: keys and values of every layer."""
    return 2 * layers * tokens * width * dtype_bytes


def attention_bytes(heads: int, queries: int, keys: int, dtype_bytes: int = 4) -> int:
    """Scores of one layer's attention when the kernel materialises them (the math path): heads · L_q · L_k."""
    return heads * queries * keys * dtype_bytes
