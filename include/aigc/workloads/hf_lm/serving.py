"""The ``hf-causal-lm`` workload's stages 3 and 4: a registered version's variant loaded into its
``transformers`` architecture, generating greedy continuations with the library's ``generate`` (KV cache).

A version's card holds the model's ``config.json`` and pins its base by hash; the tokenizer is the base's, read
from the base's folder and checked against those hashes (a base replaced since would tokenize differently).
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import torch
from safetensors.torch import load as load_safetensors

from aigc.registry import variants
from aigc.workload import Serving
from aigc.workloads.hf_lm.base import (
    TOKENIZER_PREFIXES,
    BaseModelError,
    fingerprint,
    load_tokenizer,
    local_folder,
    model_from_config,
)


class Item(NamedTuple):
    """A prompt as the decoding loop takes it."""

    ids: list[int]
    seed: int
    max_new: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]


def base_folder_of(card: dict):
    """The local folder of the base a version was fine-tuned from, once its tokenizer files are the ones the card
    pinned (a base replaced since would tokenize differently)."""
    hf = card["hf"]
    uri = hf["base_uri"]
    folder = local_folder(uri)
    now, pinned = fingerprint(folder, tokenizer_only=True)["files"], hf["base"]["files"]
    changed = sorted(n for n in pinned if n.startswith(TOKENIZER_PREFIXES) and now.get(n) != pinned[n])
    if changed:
        raise BaseModelError(f"the base at {uri} is not the one this version was trained from: its {changed} "
                             "changed since (sha256 differs from the model card's); restore it, or train again")
    return folder


class HFServing(Serving):
    """Prompts → continuations of up to ``new_tokens`` tokens (a prompt keeps its last context − new tokens, so
    every position was seen in training): sampled at ``temperature`` within the ``top_p`` nucleus, each prompt from
    its own generator seeded by its seed, so an output depends on its prompt and seed, not on what it is batched
    with; greedy at temperature 0."""

    def __init__(self, card: dict, variant: str, data: bytes, device: torch.device, version: str):
        hf = card["hf"]
        self.base_folder = base_folder_of(card)
        self.tokenizer = load_tokenizer(self.base_folder)
        self.context, self.new_tokens = hf["context"], hf["new_tokens"]
        self.temperature, self.top_p = hf.get("temperature", 0.0), hf.get("top_p", 1.0)
        tensors = load_safetensors(data)
        state, dtype = variants.decode(variant, tensors)
        self.model = model_from_config(hf["config"])
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = set(getattr(self.model, "_tied_weights_keys", None) or ())
        if unexpected or set(missing) - tied:
            raise BaseModelError(f"version {version} {variant}: weights do not fit its config (missing "
                                 f"{sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]})")
        if variant in variants.CPU_KINDS:
            device = torch.device("cpu")  # what the core's serving_device says: fbgemm's kernels are the CPU's
            variants.swap_dynamic_int8(self.model, tensors)
        self.model.to(device=device, dtype=dtype).eval()
        self.version, self.variant, self.device = version, variant, device

    # What stage 4's shard engine and stage 5's batched answers use (aigc.workloads.text.serving.shard_model): a
    # prompt's item is its token ids, its seed and its own settings (the prompt file's options, else the model's).
    def settings_of(self, prompt: dict) -> tuple[int, float, float, tuple[str, ...]]:
        """(max new tokens, temperature, top-p, stop strings) of a prompt: its options, else the model's."""
        o = prompt.get("options") or {}
        return (int(o.get("max_new_tokens", self.new_tokens)), float(o.get("temperature", self.temperature)),
                float(o.get("top_p", self.top_p)), tuple(o.get("stop", ())))

    def items(self, prompts: list[dict]) -> list[Item]:
        eos, out = self.tokenizer.eos_token_id, []
        for p in prompts:
            new, temperature, top_p, stop = self.settings_of(p)
            ids = self.tokenizer(p["prompt"], add_special_tokens=False)["input_ids"][-max(1, self.context - new):]
            out.append(Item(ids or [eos], int(p["seed"]), new, temperature, top_p, stop))
        return out

    @staticmethod
    def tokens_of(item: Item) -> int:
        return len(item.ids)

    def cache_key(self, prompt: dict) -> list:
        new, temperature, top_p, stop = self.settings_of(prompt)
        sampled = [prompt["seed"], temperature, top_p] if temperature > 0 else []
        return [prompt["prompt"], new, list(stop), *sampled]

    def output(self, item: Item, tokens: list[int]) -> dict:
        """A continuation's row values, cut before the first of the prompt's stop strings (the tokens that made
        it, and the stop string, left out)."""
        text = self.tokenizer.decode(tokens)
        if item.stop and any(stop in text for stop in item.stop):
            for k in range(1, len(tokens) + 1):
                text = self.tokenizer.decode(tokens[:k])
                cut = min((text.find(stop) for stop in item.stop if stop in text), default=-1)
                if cut >= 0:
                    return {"text": text[:cut], "prompt_tokens": len(item.ids), "new_tokens": k}
        return {"text": text, "prompt_tokens": len(item.ids), "new_tokens": len(tokens)}

    @torch.no_grad()
    def continue_items(self, items: list[Item], greedy: bool = False) -> list[list[int]]:
        """Each prompt's continuation ids, up to its ``max_new`` tokens (the end of text ends one and is not
        returned): one batch, left-padded, prefilled once, then decoded a token per row per step against the
        library's KV cache; ``greedy``: the argmax whatever the temperature."""
        from transformers import DynamicCache

        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        b, longest = len(items), max(len(it.ids) for it in items)
        ids = torch.full((b, longest), pad, dtype=torch.long)
        mask = torch.zeros((b, longest), dtype=torch.long)
        for row, it in enumerate(items):
            ids[row, longest - len(it.ids):] = torch.tensor(it.ids)
            mask[row, longest - len(it.ids):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        generators = [torch.Generator().manual_seed(it.seed) for it in items]
        cache = DynamicCache(config=self.model.config)  # filled in place by every forward pass
        # The last position's logits only, as the library's generate asks (prompt × vocab per prompt otherwise:
        # most of the prefill's memory for a real model's vocabulary, and none of it used).
        last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(self.model.forward).parameters \
            else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                         **last_only)
        next_position = positions[:, -1] + 1
        result: list[list[int]] = [[] for _ in range(b)]
        limit = torch.tensor([it.max_new for it in items])
        finished = limit <= 0
        argmax_only = greedy or all(it.temperature <= 0 for it in items)
        for step in range(int(limit.max())):
            logits = out.logits[:, -1].float().cpu()
            token = logits.argmax(-1) if argmax_only else torch.stack(
                [self._pick(logits[r], it, generators[r]) for r, it in enumerate(items)])
            finished |= token == eos
            for row in torch.nonzero(~finished).flatten().tolist():
                result[row].append(int(token[row]))
            finished |= torch.tensor([len(r) for r in result]) >= limit
            if bool(finished.all()):
                break
            mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=self.device)], dim=1)
            out = self.model(input_ids=token[:, None].to(self.device), attention_mask=mask,
                             position_ids=(next_position + step)[:, None], cache=cache, use_cache=True)
        return result

    @staticmethod
    def _pick(logits: torch.Tensor, item: Item, generator: torch.Generator | None) -> torch.Tensor:
        """(vocab,) → the next token: the argmax at temperature 0 (or without a generator), else a draw from the
        item's top-p nucleus by its own generator."""
        if item.temperature <= 0 or generator is None:
            return logits.argmax()
        probs = torch.softmax(logits / item.temperature, dim=-1)
        ordered, order = probs.sort(descending=True)
        ordered = ordered.masked_fill(ordered.cumsum(-1) - ordered > item.top_p, 0.0)  # the top token always in
        return order[torch.multinomial(ordered, 1, generator=generator)[0]]

    def generate(self, prompts, seeds):
        """Greedy continuations: what gate 3 compares a variant with fp32 by, token for token, and times (stages 4
        and 5 sample, through ``items`` and ``continue_items``)."""
        items = self.items([{"prompt": p, "seed": s} for p, s in zip(prompts, seeds, strict=True)])
        return [self.output(it, new) for it, new in zip(items, self.continue_items(items, greedy=True), strict=True)]

    @torch.no_grad()
    def divergence(self, reference: HFServing, prompts: list[str], seeds: list[int]) -> dict:
        """Gate 3's look past the argmax: on fp32's greedy continuation of each smoke prompt (teacher-forced, so
        every variant is read at the same positions), KL(fp32 ‖ this variant) of the next-token distributions, in
        nats per token: the mean over a prompt's positions, then the mean and the largest over prompts. Greedy
        agreement alone passes a variant whose top token survives while the probabilities that sampling draws
        from have moved."""
        items = self.items([{"prompt": p, "seed": s} for p, s in zip(prompts, seeds, strict=True)])
        per_prompt = []
        for item, continuation in zip(items, reference.continue_items(items, greedy=True), strict=True):
            start = len(item.ids) - 1  # the last prompt position predicts the first new token
            stop = start + max(1, len(continuation))
            ids = torch.tensor([item.ids + continuation])
            fp32 = reference.model(input_ids=ids.to(reference.device)).logits[0, start:stop].float().cpu()
            own = self.model(input_ids=ids.to(self.device)).logits[0, start:stop].float().cpu()
            fp32, own = fp32.log_softmax(-1), own.log_softmax(-1)
            per_prompt.append(float((fp32.exp() * (fp32 - own)).sum(-1).mean()))
        return {"logprob_kl_vs_fp32": float(f"{sum(per_prompt) / len(per_prompt):.4g}"),
                "logprob_kl_max_vs_fp32": float(f"{max(per_prompt):.4g}")}

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

