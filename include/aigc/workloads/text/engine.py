"""The text workload's stage 4: one shard's prompts through the safety check, the cache and the adaptive batcher.

Prompts are batched by their token counts (the batcher sorts and buckets them, so a batch pads little) under
the memory budget, with ``DecoderMemory`` as the memory model and measured peaks to calibrate it; a
generated text is cached by everything that determines it (version, variant, prompt, new tokens) as soon as
its batch returns, so a retried shard redoes nothing a killed attempt finished."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import zlib

from aigc.batching import AdaptiveBatcher, DeviceProbe, meter_for
from aigc.batching.faults import SimulatedOOM
from aigc.devices import pick_device
from aigc.lake.base import PreconditionFailed
from aigc.lake.keys import join
from aigc.safety import blocked_term
from aigc.workloads.text.generate import DecoderMemory, generate_ids


def cache_key(version: str, variant: str, prompt: str, new_tokens: int) -> str:
    return hashlib.sha256(json.dumps(["text", version, variant, prompt, new_tokens]).encode()).hexdigest()


def run_shard(lake, plan: dict, prompts: list[dict], cfg, workload) -> tuple[list[dict], dict]:
    from aigc.registry.loader import load_serving

    device = pick_device().type
    serving = load_serving(lake, plan["model"], plan["version"], plan["variant"], device, workload.serving)
    cache_prefix = join("cache", "generations", plan["model"], plan["version"], plan["variant"])
    new = serving.new_tokens

    def row(p: dict, **values) -> dict:
        return {"prompt_id": p["prompt_id"], "prompt": p["prompt"], "seed": p["seed"], "status": "generated",
                "reason": None, "text": None, "prompt_tokens": None, "new_tokens": None,
                "model_version": plan["version"], "variant": plan["variant"], "latency_ms": None,
                "batch_size": None, "cached": False, **values}

    rows: dict[int, dict] = {}
    todo, keys = [], {}
    for i, p in enumerate(prompts):
        term = blocked_term(p["prompt"], cfg.prepare.blocklist)
        if term or len(p["prompt"]) > cfg.workload.settings.max_chars:
            reason = f"blocked term {term!r}" if term else \
                f"prompt longer than max_chars={cfg.workload.settings.max_chars} (got {len(p['prompt'])})"
            rows[i] = row(p, status="refused", reason=reason)
            continue
        k = cache_key(plan["version"], plan["variant"], p["prompt"], new)
        keys[i] = join(cache_prefix, k[:2], k + ".json")
        if lake.exists(keys[i]):
            rows[i] = row(p, **lake.get_json(keys[i]), cached=True)
        else:
            todo.append(i)

    ids = serving.prompt_ids([prompts[i]["prompt"] for i in todo])
    lengths = [len(x) for x in ids]
    b = cfg.batching
    model = serving.model
    memory = DecoderMemory(layers=model.layers, width=model.width, heads=model.blocks[0].heads,
                           vocab=model.head.out_features, new_tokens=new,
                           bytes_per_unit=float(next(model.parameters()).element_size()))
    probe = DeviceProbe(device, budget_fraction=b.budget_fraction, safety_margin_bytes=b.safety_margin_mb << 20,
                        budget_bytes=b.budget_mb << 20)
    seed = zlib.crc32(f"{plan['run_id']}/{prompts[0]['prompt_id'] if prompts else ''}".encode())
    faults = SimulatedOOM(rate=b.oom_rate, seed=seed) if b.oom_rate else None

    def run_batch(batch: list[int]) -> list[dict]:
        if faults:
            faults.check([lengths[j] for j in batch])
        t0 = time.perf_counter()
        out = generate_ids(model, [ids[j] for j in batch], new, serving.pad_id, serving.eos_id)
        per_item = (time.perf_counter() - t0) * 1000 / len(batch)
        results = []
        for j, tokens in zip(batch, out, strict=True):
            output = {"text": serving.tokenizer.decode(tokens), "prompt_tokens": lengths[j],
                      "new_tokens": len(tokens)}
            with contextlib.suppress(PreconditionFailed):  # per batch: a killed attempt's work survives
                lake.put_if_absent(keys[todo[j]], json.dumps(output).encode())
            results.append(row(prompts[todo[j]], **output, latency_ms=round(per_item, 4), batch_size=len(batch)))
        return results

    batcher = AdaptiveBatcher(run_batch, lengths, memory, probe.budget_bytes, grow=b.grow, shrink=b.shrink,
                              max_batch=b.max_batch, max_retries=b.max_retries, backoff_s=b.backoff_s,
                              backoff_max_s=b.backoff_max_s, jitter=b.jitter, tolerance=b.tolerance,
                              peaks=meter_for(device))
    generated, report = batcher() if todo else ([], None)
    for i, r in zip(todo, generated, strict=True):
        rows[i] = r
    summary = report.to_dict() if report else {"items": 0, "batches": 0, "ooms": 0, "items_per_s": 0.0}
    return [rows[i] for i in range(len(prompts))], summary
