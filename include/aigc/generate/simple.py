"""Stage 4 for a workload that brings only a model to serve: one shard's prompts through the safety check, the
cache and the adaptive batcher, each output turned into its row by the workload (``Workload.output_row``).

Every prompt costs one unit of memory here (``MemoryModel`` of width 1): a workload whose items differ in cost
writes its own ``generate_shard`` with a memory model of its own, as the text workload does."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time

from aigc.batching import AdaptiveBatcher, DeviceProbe, MemoryModel
from aigc.lake.base import PreconditionFailed
from aigc.lake.keys import join
from aigc.safety import blocked_term


def generate_shard_simple(lake, plan: dict, prompts: list[dict], cfg, workload) -> tuple[list[dict], dict]:
    from aigc.registry.loader import load_serving

    serving = load_serving(lake, plan["model"], plan["version"], plan["variant"], "cpu", workload.serving)
    cache_prefix = join("cache", "generations", plan["model"], plan["version"], plan["variant"])
    empty = {name: None for name, _ in workload.output_columns}

    def row(p: dict, **values) -> dict:
        return {"prompt_id": p["prompt_id"], "prompt": p["prompt"], "seed": p["seed"], "status": "generated",
                "reason": None, **empty, "model_version": plan["version"], "variant": plan["variant"],
                "latency_ms": None, "batch_size": None, "cached": False, **values}

    rows: dict[int, dict] = {}
    todo, keys = [], {}
    for i, p in enumerate(prompts):
        term = blocked_term(p["prompt"], cfg.prepare.blocklist)
        if term or len(p["prompt"]) > cfg.generate.max_prompt_chars:
            limit = cfg.generate.max_prompt_chars
            rows[i] = row(p, status="refused", reason=f"blocked term {term!r}" if term else
                          f"prompt longer than max_prompt_chars={limit} (got {len(p['prompt'])})")
            continue
        k = hashlib.sha256(json.dumps([workload.name, plan["version"], plan["variant"], p["prompt"],
                                       p["seed"]]).encode()).hexdigest()
        keys[i] = join(cache_prefix, k[:2], k + ".json")
        if lake.exists(keys[i]):
            rows[i] = row(p, **lake.get_json(keys[i]), cached=True)
        else:
            todo.append(i)

    def run_batch(batch: list[int]) -> list[dict]:
        chosen = [prompts[todo[j]] for j in batch]
        t0 = time.perf_counter()
        outputs = serving.generate([p["prompt"] for p in chosen], [p["seed"] for p in chosen])
        per_item = (time.perf_counter() - t0) * 1000 / len(batch)
        out = []
        for j, p, output in zip(batch, chosen, outputs, strict=True):
            values = workload.output_row(output)
            with contextlib.suppress(PreconditionFailed):  # per batch: a killed attempt's work survives
                lake.put_if_absent(keys[todo[j]], json.dumps(values).encode())
            out.append(row(p, **values, latency_ms=round(per_item, 4), batch_size=len(batch)))
        return out

    b = cfg.batching
    probe = DeviceProbe("cpu", budget_fraction=b.budget_fraction, budget_bytes=b.budget_mb << 20)
    batcher = AdaptiveBatcher(run_batch, [1] * len(todo), MemoryModel(width=1), probe.budget_bytes, grow=b.grow,
                              shrink=b.shrink, max_batch=b.max_batch, max_retries=b.max_retries, backoff_s=b.backoff_s,
                              backoff_max_s=b.backoff_max_s, jitter=b.jitter, tolerance=b.tolerance)
    generated, report = batcher() if todo else ([], None)
    for i, r in zip(todo, generated, strict=True):
        rows[i] = r
    summary = report.to_dict() if report else {"items": 0, "batches": 0, "ooms": 0, "items_per_s": 0.0}
    return [rows[i] for i in range(len(prompts))], summary
