"""The shard engine: one shard's prompts through the safety check, the cache and the adaptive batcher, for every
workload. The workload brings a ``ShardModel`` (its model loaded, what an item costs, how an output becomes a row).

Per prompt: refused (a blocked term, or longer than the limit: a row with its reason), served from the cache (an
entry keyed by everything that determines the output), or run. What is run is batched by the ``AdaptiveBatcher``
under the device's memory budget with the workload's ``MemoryModel``; each batch's outputs are turned into rows and
written to the cache on a writer thread (the batcher times compute alone), per batch, so a killed attempt's work
survives its retry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aigc.batching import AdaptiveBatcher, BatchReport, DeviceProbe, MemoryModel, meter_for
from aigc.batching.faults import SimulatedOOM
from aigc.devices import device_class, synchronizer
from aigc.lake.base import ObjectNotFound, PreconditionFailed
from aigc.lake.keys import join
from aigc.safety import blocked_term

LEARNED = "_BATCH_SIZES.json"  # per run: what each shard's batcher settled on, for the next shard
CARRIED = "_BATCH_SIZES-{device}.json"
"""Per version, variant and device class (in the cache's folder of that version and variant): what the last run's
batchers settled on, which the next run's first shards start from (tomorrow night's run on the same kind of worker:
the same model, the same sizes)."""


def _prompts(prompts: list[dict]) -> list[dict]:
    return prompts


def _one_unit(_item: Any) -> int:
    return 1


def _json_values(blob: bytes) -> dict:
    return json.loads(blob)


@dataclass
class ShardModel:
    """What a workload gives the engine for one shard: its model, loaded on ``device``, and how to use it."""

    device: str
    run: Callable[[list], Sequence]
    """A batch of items (what ``prepare`` made of the prompts) → one raw output per item, in order."""
    finish: Callable[[Any, Any], tuple[dict, bytes]]
    """(item, raw output) → (the row's ``output_columns`` values, the bytes to cache); on the writer thread."""
    key: Callable[[dict], list]
    """What besides the version and variant determines a prompt's output: its words, its seed, a setting."""
    cached: Callable[[bytes], dict] = _json_values
    """Cached bytes → the row's values."""
    prepare: Callable[[list[dict]], list] = _prompts
    """The prompts to run (dicts with prompt, seed …) → the items ``run`` takes (token ids, or the prompts)."""
    length: Callable[[Any], int] = _one_unit
    """An item's size in the memory model's unit (tokens, pixels): the batcher buckets and budgets by it."""
    memory: MemoryModel = field(default_factory=lambda: MemoryModel(width=1))
    max_chars: tuple[int, str] | None = None
    """(limit, the setting's name) for prompt length; None: the core's ``generate.max_prompt_chars``."""
    suffix: str = ".json"
    remember_sizes: bool = False
    """Start each shard from the batch sizes earlier shards of the run learned, else those the last run of the same
    version and variant learned on this device class (``CARRIED``) (one bucket per run: fixed-size items); off where
    lengths vary, whose buckets a shard relearns cheaply."""

    @classmethod
    def of_serving(cls, serving, device: str, output_row: Callable[[Any], dict]) -> ShardModel:
        """A workload that brings only a ``Serving``: every prompt costs one unit, each output stored as JSON."""

        def finish(_prompt: dict, output: Any) -> tuple[dict, bytes]:
            values = output_row(output)
            return values, json.dumps(values).encode()

        return cls(device, run=lambda ps: serving.generate([p["prompt"] for p in ps], [p["seed"] for p in ps]),
                   finish=finish, key=lambda p: [p["prompt"], p["seed"]])


def load_for_shard(lake, plan: dict, serve: Callable):
    """(the plan's version and variant loaded by ``serve``, the device it runs on): the worker's GPU
    (CUDA_VISIBLE_DEVICES; AIGC_REQUIRE_GPU checked), unless the variant runs on the CPU there (ONNX without
    onnxruntime's CUDA provider): the batch budget is then the host's memory, not the GPU's."""
    from aigc.devices import pick_device
    from aigc.registry.loader import load_serving, serving_device

    device = serving_device(plan["variant"], pick_device()).type
    return load_serving(lake, plan["model"], plan["version"], plan["variant"], device, serve), device


def output_row(plan: dict, p: dict, columns: Sequence[str], **values) -> dict:
    """A generation row of ``p``: the core's columns, the workload's ``columns`` (None unless given), ``values``."""
    return {"prompt_id": p["prompt_id"], "prompt": p["prompt"], "seed": p["seed"], "status": "generated",
            "reason": None, **dict.fromkeys(columns), "model_version": plan["version"], "variant": plan["variant"],
            "latency_ms": None, "batch_size": None, "cached": False, **values}


def answer_shard(lake, plan: dict, prompts: list[dict], cfg, model: ShardModel, columns: Sequence[str],
                 run_prefix: str) -> tuple[list[dict], dict]:
    """One row per prompt, in order (the core's columns and ``columns``), and the batcher's report."""
    cache_prefix = join("cache", "generations", plan["model"], plan["version"], plan["variant"])
    limit, setting = model.max_chars or (cfg.generate.max_prompt_chars, "max_prompt_chars")

    def row(p: dict, **values) -> dict:
        return output_row(plan, p, columns, **values)

    rows: dict[int, dict] = {}
    todo: list[int] = []
    keys: dict[int, str] = {}
    for i, p in enumerate(prompts):
        term = blocked_term(p["prompt"], cfg.prepare.blocklist)
        if term or len(p["prompt"]) > limit:
            rows[i] = row(p, status="refused", reason=f"blocked term {term!r}" if term else
                          f"prompt longer than {setting}={limit} (got {len(p['prompt'])})")
            continue
        k = hashlib.sha256(json.dumps([plan["version"], plan["variant"], *model.key(p)]).encode()).hexdigest()
        keys[i] = join(cache_prefix, k[:2], k + model.suffix)
        try:  # one request a prompt, hit or miss (not an existence check and then the read)
            rows[i] = row(p, **model.cached(lake.get_bytes(keys[i])), cached=True)
        except ObjectNotFound:
            todo.append(i)

    items = model.prepare([prompts[i] for i in todo])
    lengths = [model.length(x) for x in items]
    b = cfg.batching
    # A stable seed (not hash(), which changes per process): the same run injects the same faults.
    seed = zlib.crc32(f"{plan['run_id']}/{prompts[0]['prompt_id'] if prompts else ''}".encode())
    faults = SimulatedOOM(rate=b.oom_rate, seed=seed) if b.oom_rate else None
    probe = DeviceProbe(model.device, budget_fraction=b.budget_fraction, safety_margin_bytes=b.safety_margin_mb << 20,
                        budget_bytes=b.budget_mb << 20)
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aigc-shard-writer")
    synchronize = synchronizer(model.device)

    def finish(j: int, output: Any, per_item_ms: float, size: int) -> dict:
        values, blob = model.finish(items[j], output)
        with contextlib.suppress(PreconditionFailed):  # another attempt cached it first: the same content
            lake.put_if_absent(keys[todo[j]], blob)
        return row(prompts[todo[j]], **values, latency_ms=round(per_item_ms, 4), batch_size=size)

    def run_batch(batch: list[int]) -> list:
        if faults:
            faults.check([lengths[j] for j in batch])
        t0 = time.perf_counter()
        outputs = model.run([items[j] for j in batch])
        synchronize()  # a run that returns CUDA tensors has only queued its kernels: time the work, not the launch
        per_item = (time.perf_counter() - t0) * 1000 / len(batch)
        return [writer.submit(finish, j, out, per_item, len(batch)) for j, out in zip(batch, outputs, strict=True)]

    learned_key = join(run_prefix, LEARNED)
    carried_key = join(cache_prefix, CARRIED.format(device=device_class(model.device)))
    learned = (_learned(lake, learned_key) or _learned(lake, carried_key)) if model.remember_sizes else {}
    # On a GPU the first size comes from the memory plan (free memory and the model), not a small fixed start:
    # a GPU's throughput climbs with the batch far past a CPU's, and the climb from 32 would cost the shard.
    on_gpu = str(model.device).startswith("cuda")
    batcher = AdaptiveBatcher(run_batch, lengths, model.memory, probe.budget_bytes, **b.batcher_options(),
                              learned=learned, peaks=meter_for(model.device), start_batch=None if on_gpu else 32)
    try:
        pending, report = batcher() if todo else ([], BatchReport(learned=learned))
        generated = [f.result() for f in pending]
    finally:
        writer.shutdown(wait=True)  # what was computed is cached even when the batcher gave up
    for i, r in zip(todo, generated, strict=True):
        rows[i] = r
    if todo and model.remember_sizes:
        # Last writer wins: shards running side by side learn the same thing; a stale value only costs a few grows
        # (a bucket that starts from a learned size still re-probes its neighbours).
        sizes = {str(k): v for k, v in sorted({**learned, **report.learned}.items())}
        lake.put_json(learned_key, sizes)
        lake.put_json(carried_key, sizes)
    return [rows[i] for i in range(len(prompts))], report.to_dict()


def _learned(lake, key: str) -> dict[int, int]:
    if not lake.exists(key):
        return {}
    return {int(k): int(v) for k, v in lake.get_json(key).items()}
