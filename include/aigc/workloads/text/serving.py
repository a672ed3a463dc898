"""The text workload's stage 3: a version's variant loaded to generate, its smoke prompts, and how a variant's
continuations compare with fp32's."""

from __future__ import annotations

import os
import random

import torch
from safetensors.torch import load as load_safetensors

from aigc.registry import variants
from aigc.workload import Serving
from aigc.workloads.text.corpus import document
from aigc.workloads.text.generate import DecoderMemory, generate_ids
from aigc.workloads.text.model import TextLM
from aigc.workloads.text.tokenizer import load_tokenizer, special_ids


class TextServing(Serving):
    """Prompts → greedy continuations of up to ``new_tokens`` tokens (a prompt keeps its last context − new
    tokens: the model never sees positions it was not trained on)."""

    def __init__(self, card: dict, variant: str, data: bytes, device: torch.device, version: str,
                 new_tokens: int | None = None):
        m = card["model"]
        self.tokenizer = load_tokenizer(card["tokenizer"])
        self.pad_id, self.eos_id = special_ids(self.tokenizer)
        self.context, self.new_tokens = m["context"], new_tokens or m.get("new_tokens", 48)
        state, dtype = variants.decode(variant, load_safetensors(data))
        self.model = TextLM(self.tokenizer.get_vocab_size(), m["layers"], m["width"], m["heads"])
        self.model.load_state_dict(state)
        self.model.to(device=device, dtype=dtype).eval()
        self.version, self.variant, self.device = version, variant, device

    def prompt_ids(self, prompts: list[str]) -> list[list[int]]:
        keep = max(1, self.context - self.new_tokens)
        return [self.tokenizer.encode(p).ids[-keep:] or [self.eos_id] for p in prompts]

    def generate(self, prompts, seeds):
        return [self.tokenizer.decode(ids) for ids in self.continue_ids(self.prompt_ids(prompts))]

    def continue_ids(self, ids: list[list[int]]) -> list[list[int]]:
        """Prompts' token ids → their continuations' ids (greedy, one batch padded to its longest prompt)."""
        return generate_ids(self.model, ids, self.new_tokens, self.pad_id, self.eos_id)

    # What stage 4's shard engine and stage 5's batched answers use (``shard_model``, ``decoder_answers``): a
    # prompt's item is its token ids (greedy decoding ignores the seed).
    def items(self, prompts: list[dict]) -> list[list[int]]:
        return self.prompt_ids([p["prompt"] for p in prompts])

    def continue_items(self, items: list[list[int]]) -> list[list[int]]:
        return self.continue_ids(items)

    @staticmethod
    def tokens_of(item: list[int]) -> int:
        return len(item)

    def cache_key(self, prompt: dict) -> list:
        return [prompt["prompt"], self.new_tokens]

    def output(self, item: list[int], tokens: list[int]) -> dict:
        return {"text": self.tokenizer.decode(tokens), "prompt_tokens": len(item), "new_tokens": len(tokens)}

    def memory(self) -> DecoderMemory:
        """The batcher's memory model of a batch of this model's prompts (token counts as lengths)."""
        m = self.model
        return DecoderMemory(layers=m.layers, width=m.width, heads=m.blocks[0].heads, vocab=m.head.out_features,
                             new_tokens=self.new_tokens, bytes_per_unit=float(next(m.parameters()).element_size()))


def shard_model(lake, plan: dict, cfg, serve=TextServing):
    """Stage 4's model for the core's shard engine: prompts batched by their token counts (the batcher sorts and
    buckets them, so a batch pads little) under the serving's memory model (``DecoderMemory``); a prompt longer than
    the context keeps its last tokens, so only ``max_chars`` refuses one; a continuation is cached by everything that
    determines it (``cache_key``: the version and variant, the prompt, new tokens, and for sampling its seed and
    settings). ``serve``: any decoder serving with ``items``, ``continue_items``, ``tokens_of``, ``cache_key``,
    ``output`` and ``memory`` (the hf-causal-lm workload's too)."""
    import json

    from aigc.generate.engine import ShardModel, load_for_shard

    serving, device = load_for_shard(lake, plan, serve)

    def finish(item, tokens: list[int]) -> tuple[dict, bytes]:
        values = serving.output(item, tokens)
        return values, json.dumps(values).encode()

    return ShardModel(device, run=serving.continue_items, finish=finish, key=serving.cache_key, prepare=serving.items,
                      length=serving.tokens_of, memory=serving.memory(),
                      max_chars=(cfg.workload.settings.max_chars, "max_chars"))


def smoke_prompts(n: int, seed: int) -> list[str]:
    """Log prefixes from the reference world ending at an item's number: a model that learnt the logs continues
    with a scene."""
    rng = random.Random(seed)
    prompts = []
    for i in range(n):
        lines = document(rng, rng.randint(3, 40), f"smoke{i}").split("\n")
        cut = rng.randint(1, max(1, len([x for x in lines if x.startswith("Item")]) - 1))
        prompts.append("\n".join(lines[: cut + 1]) + f"\nItem {cut + 1}:")
    return prompts


def agreement(output: str, baseline: str) -> float:
    """The fraction of ``baseline`` that ``output`` reproduces before its first difference."""
    if not baseline:
        return 1.0 if not output else 0.0
    return len(os.path.commonprefix([output, baseline])) / len(baseline)


def measure(outputs: list[str], baseline: list[str]) -> dict:
    return {"agreement_vs_fp32": round(sum(map(agreement, outputs, baseline)) / len(outputs), 4),
            "exact_match_vs_fp32": round(sum(o == b for o, b in zip(outputs, baseline, strict=True)) / len(outputs), 4),
            "mean_chars": round(sum(map(len, outputs)) / len(outputs), 1),
            "distinct_outputs": round(len(set(outputs)) / len(outputs), 4)}


def demo_prompts(lake, date: str, cfg, key: str) -> dict:
    """A demo prompt set at ``key``: log prefixes of the reference world ending at an item's number, long-tailed
    from one item (≈ 16 tokens) to 400 (≈ 4,500 tokens), and a few with blocked terms, which must be refused."""
    import json

    from aigc.safety import blocked_terms

    g = cfg.generate
    rng = random.Random(f"{g.seed}/{date}")
    rows = []
    for i in range(g.prompts):
        items = max(1, min(400, round(2.0 ** rng.uniform(0, 8.65))))  # log-uniform: as many short as long
        lines = document(rng, items + 1, f"p{i}").split("\n")[: items + 1]
        rows.append("\n".join(lines) + f"\nItem {items + 1}:")
    terms = blocked_terms()
    rows += [f"Log b{i}.\nItem 1: a {rng.choice(terms)} scene.\nItem 2:" for i in range(g.blocked_prompts)]
    records = [{"prompt_id": f"p-{i:06d}", "prompt": p, "seed": g.seed + i} for i, p in enumerate(rows)]
    rng.shuffle(records)
    lake.put_bytes(key, "".join(json.dumps(r) + "\n" for r in records).encode())
    return {"prompts_uri": lake.url(key), "prompts": len(records), "blocked": g.blocked_prompts}


def generation_checks(rows, cfg, new_tokens: int):
    """Gate 4 for generated texts: no continuation longer than ``new_tokens``, and few empty ones
    (``generate_gate.max_blank_fraction``)."""
    import great_expectations.expectations as gxe

    generated = rows[rows["status"] == "generated"]
    empty = float((generated["text"].str.strip() == "").mean()) if len(generated) else 0.0
    return rows, [gxe.ExpectColumnValuesToBeBetween(column="new_tokens", min_value=0, max_value=new_tokens)], \
        {"empty_fraction": (empty, cfg.generate_gate.max_blank_fraction)}


def samples_page(rows: list[dict]) -> bytes:
    """A Markdown page of generated texts: each prompt's last line and what the model wrote after it."""
    parts = ["# Generated samples\n"]
    for r in rows:
        tail = r["prompt"].rsplit("\n", 1)[-1]
        parts.append(f"## {r.get('prompt_id', '')} ({r.get('prompt_tokens')} prompt tokens)\n\n"
                     f"```\n…{tail}{r['text']}\n```\n")
    return "\n".join(parts).encode()
