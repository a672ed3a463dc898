"""The ``hf-causal-lm`` workload's stages 3 and 4: a registered version's variant loaded into its
``transformers`` architecture, generating greedy continuations with the library's ``generate`` (KV cache).

A version's card holds the model's ``config.json`` and pins its base by hash; the tokenizer is the base's, read
from the base's folder and checked against those hashes (a base replaced since would tokenize differently).
"""

from __future__ import annotations

import torch
from safetensors.torch import load as load_safetensors

from aigc.registry import variants
from aigc.workload import Serving
from aigc.workloads.hf_lm.base import BaseModelError, fingerprint, load_tokenizer, local_folder, model_from_config

DEMO_PREFIX = "demo:"
"""How a card names the demo base (``HFTrainingTask.card``): ``demo:llama``."""


def base_tokenizer_of(card: dict):
    """The tokenizer of the base a version was fine-tuned from, once its files are the ones the card pinned."""
    hf = card["hf"]
    uri = hf["base_uri"]
    folder = (local_folder("", uri.removeprefix(DEMO_PREFIX)) if uri.startswith(DEMO_PREFIX) else local_folder(uri))
    now, pinned = fingerprint(folder)["files"], hf["base"]["files"]
    changed = sorted(n for n in pinned if n.startswith(("tokenizer", "vocab", "merges", "special_tokens", "added"))
                     and now.get(n) != pinned[n])
    if changed:
        raise BaseModelError(f"the base at {uri} is not the one this version was trained from: its {changed} "
                             "changed since (sha256 differs from the model card's); restore it, or train again")
    return load_tokenizer(folder)


class HFServing(Serving):
    """Prompts → greedy continuations of up to ``new_tokens`` tokens (a prompt keeps its last context − new
    tokens, so every position was seen in training)."""

    def __init__(self, card: dict, variant: str, data: bytes, device: torch.device, version: str):
        hf = card["hf"]
        self.tokenizer = base_tokenizer_of(card)
        self.tokenizer.padding_side = "left"  # a decoder continues from the last real token of every row
        self.context, self.new_tokens = hf["context"], hf["new_tokens"]
        state, dtype = variants.decode(variant, load_safetensors(data))
        self.model = model_from_config(hf["config"])
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = set(getattr(self.model, "_tied_weights_keys", None) or ())
        if unexpected or set(missing) - tied:
            raise BaseModelError(f"version {version} {variant}: weights do not fit its config (missing "
                                 f"{sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]})")
        self.model.to(device=device, dtype=dtype).eval()
        self.version, self.variant, self.device = version, variant, device

    def prompt_ids(self, prompts: list[str]) -> list[list[int]]:
        keep = max(1, self.context - self.new_tokens)
        eos = self.tokenizer.eos_token_id
        return [self.tokenizer(p, add_special_tokens=False)["input_ids"][-keep:] or [eos] for p in prompts]

    @torch.no_grad()
    def continue_ids(self, ids: list[list[int]]) -> list[list[int]]:
        """Prompts' token ids → their continuations' ids (greedy; the end of text ends one and is not returned)."""
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        longest = max(len(p) for p in ids)
        batch = torch.full((len(ids), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), longest), dtype=torch.long)
        for row, p in enumerate(ids):
            batch[row, longest - len(p):] = torch.tensor(p)
            mask[row, longest - len(p):] = 1
        out = self.model.generate(input_ids=batch.to(self.device), attention_mask=mask.to(self.device),
                                  max_new_tokens=self.new_tokens, do_sample=False, pad_token_id=pad,
                                  eos_token_id=eos)
        continuations = []
        for row in out[:, longest:].tolist():
            continuations.append(row[: row.index(eos)] if eos in row else row)
        return continuations

    def memory(self):
        """The batcher's memory model of a batch of this model's prompts, from its config: the KV cache (layers ×
        key/value heads × head width × (prompt + new tokens)), the prefill's transient and the last logits; the
        element size of the variant's dtype, re-fitted from measured peaks."""
        from aigc.workloads.text.generate import DecoderMemory

        c = self.model.config
        width = getattr(c, "hidden_size", None) or c.n_embd
        heads = getattr(c, "num_attention_heads", None) or c.n_head
        kv_heads = getattr(c, "num_key_value_heads", None) or heads
        head_width = getattr(c, "head_dim", None) or width // heads
        return DecoderMemory(layers=getattr(c, "num_hidden_layers", None) or c.n_layer, width=width, heads=heads,
                             vocab=c.vocab_size, new_tokens=self.new_tokens, kv_width=kv_heads * head_width,
                             bytes_per_unit=float(next(self.model.parameters()).element_size()))

    def generate(self, prompts, seeds):
        ids = self.prompt_ids(prompts)
        return [{"text": self.tokenizer.decode(new), "prompt_tokens": len(p), "new_tokens": len(new)}
                for p, new in zip(ids, self.continue_ids(ids), strict=True)]

