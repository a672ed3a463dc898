"""Generation throughput of the hf-causal-lm workload's batcher against ``transformers``' own batched ``generate``.

    python -m bench.hf_generate_bench [--repeats 3] [--prompts 64 256] [--new-tokens 16]

The model is the workload's Llama demo base (2 layers × 64, grouped-query attention; random weights: time does not
depend on what it learnt), loaded by the workload's own serving code from safetensors. Prompts are the reference
logs cut to long-tailed lengths (log-uniform, 8 to ~990 tokens), in a shuffled order, as a prompt file has them.
Policies, over the same prompts, greedy (so outputs can be compared):

* ``generate_bK``: ``model.generate`` on fixed batches of K prompts in file order, left-padded (the library's
  batched call, K in a sweep that brackets its best);
* ``generate_sorted_bK``: the same on the prompts sorted by length first (little padding: what a careful user
  writes), answers put back in file order, K in a finer sweep (1, 4, 8, 16, 32, 64, 128); the best of every fixed policy
  in hindsight is the baseline;
* ``pipeline_bK``: ``pipeline("text-generation", batch_size=K)`` on the prompts' text (the library's highest-level
  call; it pads on the left, in file order), its continuations compared as text;
* ``ours``: the workload's decoding loop under ``AdaptiveBatcher`` (prompts bucketed by tokens, the batch grown
  under the memory model of ``HFServing.memory``), with the workload's batching settings, as stage 4 runs it (a
  size judged on one batch: ``batching.judge_batches``);
* ``ours_judge2``: the same with the core's default of two batches a judgement, which the workload's setting is
  measured against.

Repeats alternate the policies, each repeat starting one policy later; each cell is the median new tokens/s (min,
max); ``agreement`` is the share of prompts whose continuation equals ``generate``'s at batch 1. The summary compares
each batcher with the best fixed policy by median twice: the ratio of medians with the widest range the two ranges
allow, and paired by repeat (the two ran in the same repeat, minutes apart at most: a slow spell of the host slows
both), its median, range and the repeats it was faster in. Each other host's latest summary is kept beside this
run's. The last line is one JSON
object, also written to ``bench/results/hf_generate.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.provenance import other_hosts, write_results
from bench.versus import versus_best_fixed

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "hf_generate.json"
SWEEP = (1, 4, 16, 64)
SORTED_SWEEP = (1, 4, 8, 16, 32, 64, 128)  # the strongest fixed policy, swept finely around its best (16 to 64 here)
PIPELINE_SWEEP = (4, 16, 64)  # batch 1 is generate_b1 with the pipeline's overhead: minutes at 1,024 prompts


def serving(new_tokens: int):
    """The demo base as a registered fp32 version would serve it (the workload's own loading code)."""
    from safetensors.torch import save

    from aigc.registry.variants import unshared
    from aigc.workloads.hf_lm.base import DEMO_PREFIX, fingerprint, load_model, local_folder
    from aigc.workloads.hf_lm.serving import HFServing

    folder = local_folder("", "llama")
    model = load_model(folder)
    card = {"hf": {"config": json.loads((folder / "config.json").read_text()), "base_uri": f"{DEMO_PREFIX}llama",
                   "base": fingerprint(folder), "context": 1024, "new_tokens": new_tokens, "temperature": 0.0}}
    return HFServing(card, "fp32", save(unshared(model.state_dict())), torch.device("cpu"), "bench")


def prompts(s, n: int, seed: int = 0) -> list[list[int]]:
    from aigc.workloads.text.corpus import document

    rng = random.Random(seed)
    longest = s.context - s.new_tokens
    out = []
    for i in range(n):
        ids = s.tokenizer(document(rng, 120, f"b{i}"), add_special_tokens=False)["input_ids"]
        out.append(ids[: max(8, min(longest, round(2 ** rng.uniform(3, 9.95))))])
    return out


@torch.no_grad()
def generate_fixed(s, items: list[list[int]], k: int) -> list[list[int]]:
    """The library's batched call: fixed batches of ``k`` in file order, left-padded, greedy."""
    pad, eos = s.tokenizer.pad_token_id, s.tokenizer.eos_token_id
    out = []
    for i in range(0, len(items), k):
        batch = items[i:i + k]
        longest = max(map(len, batch))
        ids = torch.full((len(batch), longest), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, x in enumerate(batch):
            ids[row, longest - len(x):] = torch.tensor(x)
            mask[row, longest - len(x):] = 1
        new = s.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=s.new_tokens, do_sample=False,
                               pad_token_id=pad, eos_token_id=eos)[:, longest:].tolist()
        out += [row[: row.index(eos)] if eos in row else row for row in new]
    return out


def text_pipeline(s):
    """``transformers``' text-generation pipeline over the served model and tokenizer, greedy, left-padded."""
    from transformers import pipeline

    s.tokenizer.padding_side = "left"  # what the pipeline needs of a decoder-only model in batches
    return pipeline("text-generation", model=s.model, tokenizer=s.tokenizer, device=s.device)


def pipeline_fixed(pipe, s, texts: list[str], k: int) -> list[str]:
    out = pipe(texts, batch_size=k, max_new_tokens=s.new_tokens, do_sample=False, return_full_text=False,
               pad_token_id=s.tokenizer.pad_token_id)
    return [o[0]["generated_text"] for o in out]


def generate_sorted(s, items: list[list[int]], k: int) -> list[list[int]]:
    """Fixed batches of ``k`` over the prompts sorted by length, answers back in file order."""
    order = sorted(range(len(items)), key=lambda i: len(items[i]))
    answers = generate_fixed(s, [items[i] for i in order], k)
    out: list[list[int]] = [[] for _ in items]
    for i, answer in zip(order, answers, strict=True):
        out[i] = answer
    return out


def ours(s, items: list[list[int]], b) -> list[list[int]]:
    """Stage 4's batcher with batching settings ``b`` (a ``BatchingConfig``)."""
    from aigc.batching import AdaptiveBatcher, DeviceProbe
    from aigc.workloads.hf_lm.serving import Item

    seeded = [Item(x, 0, s.new_tokens, 0.0, 1.0, ()) for x in items]
    batcher = AdaptiveBatcher(lambda batch: s.continue_items([seeded[i] for i in batch], greedy=True),
                              [len(x) for x in items], s.memory(), DeviceProbe("cpu").budget_bytes,
                              **b.batcher_options())
    return batcher()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--new-tokens", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    s = serving(args.new_tokens)
    pipe = text_pipeline(s)
    from aigc.stages import configure

    settings = configure("default", "hf-causal-lm").batching  # the workload's, as stage 4 reads them
    rows, rates_of = [], {}
    for n in args.prompts:
        items = prompts(s, n)
        texts = [s.tokenizer.decode(x) for x in items]
        policies = {**{f"generate_b{k}": (lambda k=k, items=items: generate_fixed(s, items, k)) for k in SWEEP},
                    **{f"generate_sorted_b{k}": (lambda k=k, items=items: generate_sorted(s, items, k))
                       for k in SORTED_SWEEP},
                    **{f"pipeline_b{k}": (lambda k=k, texts=texts: pipeline_fixed(pipe, s, texts, k))
                       for k in PIPELINE_SWEEP},
                    "ours": lambda items=items: ours(s, items, settings),
                    "ours_judge2": lambda items=items: ours(s, items, replace(settings, judge_batches=2))}
        reference = generate_fixed(s, items, 1)
        reference_text = [s.tokenizer.decode(x) for x in reference]
        times: dict[str, list[float]] = {p: [] for p in policies}
        tokens: dict[str, int] = {}
        agreement: dict[str, float] = {}
        names = list(policies)
        for repeat in range(args.repeats):
            # Every policy once per repeat, each repeat starting one policy later: no policy always runs after the
            # same one (after the pipeline's batches of 64 long prompts, the allocator's state is another).
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                run = policies[name]
                t0 = time.perf_counter()
                out = run()
                times[name].append(time.perf_counter() - t0)
                if out and isinstance(out[0], str):  # the pipeline's text: its tokens counted, compared as text
                    tokens[name] = sum(len(s.tokenizer(x, add_special_tokens=False)["input_ids"]) for x in out)
                    agreement[name] = sum(a == b for a, b in zip(out, reference_text, strict=True)) / n
                else:
                    tokens[name] = sum(map(len, out))
                    agreement[name] = sum(a == b for a, b in zip(out, reference, strict=True)) / n
        for name in policies:
            rates = rates_of[n, name] = [tokens[name] / t for t in times[name]]
            rows.append({"prompts": n, "policy": name, "tokens_per_s": round(statistics.median(rates), 1),
                         "range": [round(min(rates), 1), round(max(rates), 1)], "new_tokens": tokens[name],
                         "agreement_with_b1": round(agreement[name], 4), "repeats": args.repeats})
            print(f"{n:4d} prompts  {name:19s} {rows[-1]['tokens_per_s']:8.1f} tokens/s "
                  f"({rows[-1]['range'][0]}–{rows[-1]['range'][1]})  agreement {agreement[name]:.3f}",
                  file=sys.stderr)
    summary = [versus_best_fixed(rows, rates_of, n, "tokens_per_s", args.repeats, ("ours", "ours_judge2"))
               for n in args.prompts]
    result = {"bench": "hf_generate", "model": "hf-causal-lm demo base (llama, 2 x 64, GQA 4/2)", "greedy": True,
              "new_tokens": args.new_tokens, "rows": rows, "summary": summary,
              "threads": torch.get_num_threads(),
              # each other host's latest summary: the batcher's standing differs by CPU (AVX512-BF16 or not)
              "other_hosts": other_hosts(RESULTS, ("model", "new_tokens", "summary"))}
    write_results(RESULTS, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
