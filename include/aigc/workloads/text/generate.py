"""Batched greedy decoding with a KV cache, and what it costs in memory.

A batch of prompts of different lengths is right-padded and prefilled in one causal pass (padding
comes after every real token, so no real token sees it, and no (L × L) mask is ever built); each row's
first new token comes from its last real position. Decoding then feeds one token per row per step at
that row's own position (rotary positions per row), attending to its real prompt keys and the keys it
generated (a (B, total) mask: linear, not quadratic). A row's output is the same whatever it is batched
with, to floating-point rounding.
"""

from __future__ import annotations

import torch

from aigc.batching.memory import MemoryModel
from aigc.workloads.text.model import KVCache, TextLM


@torch.no_grad()
def generate_ids(model: TextLM, prompts: list[list[int]], max_new: int, pad_id: int, eos_id: int) -> list[list[int]]:
    """Up to ``max_new`` greedy tokens after each prompt (ending early at end of text, which is not returned)."""
    device = model.embed.weight.device
    b, longest = len(prompts), max(len(p) for p in prompts)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    ids = torch.full((b, longest), pad_id, dtype=torch.long, device=device)
    for row, p in enumerate(prompts):
        ids[row, : len(p)] = torch.tensor(p, device=device)
    cache = KVCache(model.layers)
    logits = model(ids, cache=cache, select=lengths - 1)  # (B, 1, V): each row's last real token
    keys_valid = torch.arange(longest, device=device)[None, :] < lengths[:, None]  # (B, L)
    out: list[list[int]] = [[] for _ in range(b)]
    finished = torch.zeros(b, dtype=torch.bool, device=device)
    for step in range(max_new):
        token = logits[:, -1].argmax(-1)  # (B,)
        finished |= token == eos_id
        for row in torch.nonzero(~finished).flatten().tolist():
            out[row].append(int(token[row]))
        if bool(finished.all()) or step == max_new - 1:
            break
        keys_valid = torch.cat([keys_valid, torch.ones(b, 1, dtype=torch.bool, device=device)], dim=1)
        logits = model(token[:, None], positions=(lengths + step)[:, None], cache=cache,
                       mask=keys_valid[:, None, None, :])
    return out


class DecoderMemory(MemoryModel):
    """The batcher's memory model for decoding: what really grows with a batch of b prompts padded to L, each
    asking for N new tokens, in a model of ``layers`` × ``width`` (elements; ``k`` bytes each, 4 for fp32):

    * the KV cache, kept for the whole batch: 2 · layers · (L + N) · kv_width per sequence (``kv_width``: the width,
      or with grouped-query attention key/value heads × head width);
    * the prefill's largest transient, one layer at a time: the qkv projection and its rotated copies, the
      attention output, the MLP's hidden layer before and after its activation and the residual stream,
      ≈ 16 · L · width per sequence (measured: 21.4 MiB for one 4,096-token prompt at 2 × 64, of which this
      and the cache predict 21.0);
    * attention scores, heads · L² per sequence, only where the kernel materialises them (``materialised``;
      the fused CPU and GPU kernels used for causal prefill do not);
    * the last position's logits, vocab per sequence.

    The prior ``k`` is re-fitted from measured peaks like any ``MemoryModel``."""

    def __init__(self, *, layers: int, width: int, heads: int, vocab: int, new_tokens: int,
                 materialised: bool = False, base_bytes: int = 0, bytes_per_unit: float = 4.0,
                 kv_width: int | None = None):
        super().__init__(width=width, bytes_per_unit=bytes_per_unit, base_bytes=base_bytes)
        self.layers, self.heads, self.vocab, self.new_tokens = layers, heads, vocab, new_tokens
        self.materialised = materialised
        self.kv_width = kv_width or width  # grouped-query attention caches fewer key/value heads than it queries

    def per_sequence(self, length: int) -> float:
        units = 2 * self.layers * (length + self.new_tokens) * self.kv_width + 16 * length * self.width + self.vocab
        if self.materialised:
            units += self.heads * length * length
        return float(units)

    def units(self, lengths: list[int]) -> float:
        return len(lengths) * self.per_sequence(max(lengths)) if lengths else 0.0
