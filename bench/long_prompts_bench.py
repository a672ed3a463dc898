"""The seed's out-of-memory story, measured: 4,096-token prompts decoded under a memory budget.

    python -m bench.long_prompts_bench [--repeats 3] [--prompts 16 64] [--models text hf-causal-lm]

The text workload's decoder (2 layers × 64, random weights: memory and time do not depend on what it
learnt), and with ``--models … hf-causal-lm`` a ``transformers`` Llama of the same size (grouped-query attention, 8,192
positions) served by that workload's own decoding loop and memory model, generates 4 tokens after each of N prompts
of 4,096 tokens, on a simulated device of five
prompts' measured peak (``BudgetedMemory``: the bytes the batch's tensors really take, an OOM at the
allocation that passes the capacity). Policies, over the same prompts:

* ``fixed_32``: the seed's fixed batch of 32 with retries on (3 attempts): it never completes;
* ``fixed_32_split``: 32, halved after each OOM (a careful user's retry): completes after violations;
* ``best_fixed``: the best of fixed batches 1, 2 and 4 in hindsight (each known to fit);
* ``ours``: ``AdaptiveBatcher`` with the decoder's memory model (KV cache + prefill transient), calibrated
  from the peaks the device reports, starting cold.

Repeats alternate the policies; each cell is the median items/s (min, max) and the budget violations.
The last line is one JSON object per model, also written to ``bench/results/long_prompts.json``
(``long_prompts_hf.json`` for the hf-causal-lm model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.provenance import write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "long_prompts.json"

from aigc.batching import AdaptiveBatcher, ReportedPeaks  # noqa: E402
from aigc.batching.faults import BudgetedMemory  # noqa: E402
from aigc.workloads.text.generate import DecoderMemory, generate_ids  # noqa: E402
from aigc.workloads.text.model import TextLM  # noqa: E402

VOCAB, PAD, EOS, NEW, LENGTH = 512, 0, 1, 4, 4096


def text_decoder():
    """(decode a batch of token-id lists, the batcher's memory model) for the text workload's decoder."""
    model = TextLM(VOCAB, layers=2, width=64, heads=4).eval()
    return (lambda batch: generate_ids(model, batch, NEW, PAD, EOS),
            DecoderMemory(layers=2, width=64, heads=4, vocab=VOCAB, new_tokens=NEW))


def hf_decoder():
    """The same for a transformers Llama of the same size served by the hf-causal-lm workload's own code (the
    demo base's tokenizer; a config with room for 4,096-token prompts), greedy."""
    from safetensors.torch import save
    from transformers import AutoModelForCausalLM, LlamaConfig

    from aigc.registry.variants import unshared
    from aigc.workloads.hf_lm.base import DEMO_PREFIX, fingerprint, load_tokenizer, local_folder
    from aigc.workloads.hf_lm.serving import HFServing, Item

    demo = local_folder("", "llama")
    tok = load_tokenizer(demo)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    model = AutoModelForCausalLM.from_config(config)
    card = {"hf": {"config": config.to_diff_dict(), "base_uri": f"{DEMO_PREFIX}llama", "base": fingerprint(demo),
                   "context": LENGTH + NEW + 1, "new_tokens": NEW, "temperature": 0.0}}  # what config.json holds
    serving = HFServing(card, "fp32", save(unshared(model.state_dict())), torch.device("cpu"), "bench")
    return (lambda batch: serving.continue_items([Item(x, 0, NEW, 0.0, 1.0, ()) for x in batch], greedy=True),
            serving.memory())


def policies(decoder, memory, prompts, capacity):
    def decode(device, batch):
        with device.batch():
            return decoder(batch)

    def fixed_32(device):
        for _ in range(3):
            try:
                return [out for i in range(0, len(prompts), 32) for out in decode(device, prompts[i:i + 32])]
            except torch.OutOfMemoryError:
                continue
        return None  # gave up

    def fixed_32_split(device):
        out, size = [], 32
        while len(out) < len(prompts):
            try:
                out += decode(device, prompts[len(out):len(out) + size])
            except torch.OutOfMemoryError:
                size = max(1, size // 2)
        return out

    def fixed(size):
        return lambda device: [o for i in range(0, len(prompts), size) for o in decode(device, prompts[i:i + size])]

    def ours(device):
        batcher = AdaptiveBatcher(lambda batch: decode(device, [prompts[i] for i in batch]), [LENGTH] * len(prompts),
                                  memory, lambda: capacity, peaks=ReportedPeaks(lambda: device.peak))
        return batcher()[0]

    return {"fixed_32": fixed_32, "fixed_32_split": fixed_32_split, "fixed_1": fixed(1), "fixed_2": fixed(2),
            "fixed_4": fixed(4), "ours": ours}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--models", nargs="+", choices=("text", "hf-causal-lm"), default=["text"])
    args = ap.parse_args()
    torch.set_num_threads(2)
    for model in args.models:
        torch.manual_seed(0)
        run_model(model, args)


def run_model(model: str, args) -> None:
    decoder, memory = text_decoder() if model == "text" else hf_decoder()
    results = RESULTS if model == "text" else RESULTS.with_name("long_prompts_hf.json")
    rows = []
    for n in args.prompts:
        g = torch.Generator().manual_seed(n)
        prompts = [torch.randint(2, VOCAB, (LENGTH,), generator=g).tolist() for _ in range(n)]
        one = BudgetedMemory(float("inf"))
        with one.batch():
            reference = decoder(prompts[:1])[0]
        capacity = 5 * one.peak
        runs: dict[str, list[dict]] = {}
        for _ in range(args.repeats):
            for name, policy in policies(decoder, memory, prompts, capacity).items():
                device = BudgetedMemory(capacity)
                t0 = time.perf_counter()
                out = policy(device)
                seconds = time.perf_counter() - t0
                completed = out is not None and len(out) == n and out[0] == reference
                runs.setdefault(name, []).append({"items_per_s": n / seconds if completed else 0.0,
                                                  "violations": device.violations, "completed": completed})
        cells = {}
        for name, rs in runs.items():
            rates = [r["items_per_s"] for r in rs]
            cells[name] = {"median": round(statistics.median(rates), 2), "min": round(min(rates), 2),
                           "max": round(max(rates), 2), "violations": max(r["violations"] for r in rs),
                           "completed": all(r["completed"] for r in rs)}
        best = max(("fixed_1", "fixed_2", "fixed_4"), key=lambda k: cells[k]["median"])
        rows.append({"prompts": n, "prompt_tokens": LENGTH, "new_tokens": NEW,
                     "capacity_mib": round(capacity / 2**20, 1), "one_prompt_peak_mib": round(one.peak / 2**20, 1),
                     "policies": cells, "best_fixed": best,
                     "ours_vs_best_fixed": round(cells["ours"]["median"] / cells[best]["median"], 3)})
        print(f"{model}: {n} prompts of {LENGTH} tokens, capacity {capacity / 2**20:.0f} MiB: " + ", ".join(
            f"{k} {v['median']:.1f}/s ({v['violations']} violations{'' if v['completed'] else ', never completed'})"
            for k, v in cells.items()) + f"; ours / best fixed ({best}) {rows[-1]['ours_vs_best_fixed']:.2f}",
              file=sys.stderr)
    summary = {"bench": "long_prompts", "model": model, "repeats": args.repeats, "rows": rows}
    results.parent.mkdir(parents=True, exist_ok=True)
    write_results(results, summary, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
