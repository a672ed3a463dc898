"""One shard's prompts through the safety check, the cache and the adaptive batcher."""

from __future__ import annotations

import contextlib
import logging
import math
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

from PIL import Image

from aigc.batching import AdaptiveBatcher, DeviceProbe, MemoryModel, meter_for
from aigc.batching.faults import SimulatedOOM
from aigc.config import PipelineConfig
from aigc.devices import pick_device
from aigc.lake import Lake
from aigc.lake.base import PreconditionFailed
from aigc.lake.keys import join
from aigc.safety import blocked_term
from aigc.workloads.world import png_bytes

log = logging.getLogger(__name__)
LEARNED = "_BATCH_SIZES.json"  # per run: what each shard's batcher settled on, for the next shard


class ShardEngine:
    def __init__(self, lake: Lake, plan: dict, cfg: PipelineConfig):
        from aigc.generate.run import generation_prefix
        from aigc.registry.loader import serving_device
        from aigc.workloads.image.serving import Generator

        self.lake, self.plan, self.cfg = lake, plan, cfg
        # The worker's GPU (CUDA_VISIBLE_DEVICES; AIGC_REQUIRE_GPU checked), unless the variant runs on the CPU there
        # (int8 on onnxruntime without its CUDA provider): the batch budget is then the host's memory, not the GPU's.
        self.device = serving_device(plan["variant"], pick_device()).type
        self.gen = Generator.load(lake, plan["model"], plan["version"], plan["variant"], device=self.device)
        self.cache_prefix = join("cache", "generations", plan["model"], plan["version"], plan["variant"])
        self.learned_key = join(generation_prefix(plan["model"], plan["date"], plan["run_id"]), LEARNED)

    def _refusal(self, prompt: str) -> str | None:
        term = blocked_term(prompt, self.cfg.prepare.blocklist)
        if term:
            return f"blocked term {term!r}"
        if len(prompt) > self.cfg.generate.max_prompt_chars:
            return f"prompt longer than max_prompt_chars={self.cfg.generate.max_prompt_chars} (got {len(prompt)})"
        return None

    def _row(self, p: dict, **values) -> dict:
        r = self.gen.config.resolution
        return {"prompt_id": p["prompt_id"], "prompt": p["prompt"], "seed": p["seed"], "status": "generated",
                "reason": None, "image": None, "width": r, "height": r, "model_version": self.plan["version"],
                "variant": self.plan["variant"], "latency_ms": None, "batch_size": None, "cached": False, **values}

    def run(self, prompts: list[dict]) -> tuple[list[dict], dict]:
        from aigc.generate.run import cache_key

        rows: dict[int, dict] = {}
        todo: list[int] = []
        keys: dict[int, str] = {}
        for i, p in enumerate(prompts):
            reason = self._refusal(p["prompt"])
            if reason:
                rows[i] = self._row(p, status="refused", reason=reason, width=None, height=None)
                continue
            keys[i] = join(self.cache_prefix, (k := cache_key(self.plan["version"], self.plan["variant"], p["prompt"],
                                                                p["seed"], self.gen.config.resolution))[:2], k + ".png")
            if self.lake.exists(keys[i]):
                rows[i] = self._row(p, image=self.lake.get_bytes(keys[i]), cached=True)
            else:
                todo.append(i)

        b = self.cfg.batching
        r, c = self.gen.config.resolution, self.gen.config.channels
        # What drives this model's memory and time is the image size, the same for every prompt (not its
        # words: captions are padded to one length): one bucket, one learned batch size.
        lengths = [r] * len(todo)
        # A stable seed (not hash(), which changes per process): the same run injects the same faults.
        seed = zlib.crc32(f"{self.plan['run_id']}/{prompts[0]['prompt_id'] if prompts else ''}".encode())
        faults = SimulatedOOM(rate=b.oom_rate, seed=seed) if b.oom_rate else None
        probe = DeviceProbe(self.device, budget_fraction=b.budget_fraction,
                            safety_margin_bytes=b.safety_margin_mb << 20, budget_bytes=b.budget_mb << 20)
        # d² ≈ activation elements per image (a few feature maps of channels × R²); calibrated on GPUs.
        model = MemoryModel(width=int(math.sqrt(8 * c * r * r)), base_bytes=0)
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aigc-png")

        def encode_and_cache(j: int, p: dict, pixels, per_item_ms: float, size: int) -> dict:
            png = png_bytes(Image.fromarray(pixels))
            with contextlib.suppress(PreconditionFailed):  # filled per batch: a killed attempt's work survives
                self.lake.put_if_absent(keys[todo[j]], png)
            return self._row(p, image=png, latency_ms=round(per_item_ms, 4), batch_size=size)

        def run_batch(batch: list[int]) -> list:
            if faults:
                faults.check([lengths[j] for j in batch])
            chosen = [prompts[todo[j]] for j in batch]
            t0 = time.perf_counter()
            images = self.gen.generate([p["prompt"] for p in chosen], [p["seed"] for p in chosen]).numpy()
            per_item = (time.perf_counter() - t0) * 1000 / len(batch)
            # Encoding and the cache write go to a thread: the batcher times (and climbs on) compute alone.
            return [writer.submit(encode_and_cache, j, p, pixels, per_item, len(batch))
                    for j, p, pixels in zip(batch, chosen, images, strict=True)]

        learned = self._learned()
        batcher = AdaptiveBatcher(run_batch, lengths, model, probe.budget_bytes, grow=b.grow, shrink=b.shrink,
                                  max_batch=b.max_batch, max_retries=b.max_retries, backoff_s=b.backoff_s,
                                  backoff_max_s=b.backoff_max_s, jitter=b.jitter, tolerance=b.tolerance,
                                  learned=learned, peaks=meter_for(self.device))
        try:
            pending, report = batcher()
            generated = [f.result() for f in pending]
        finally:
            writer.shutdown(wait=True)  # what was computed is cached even when the batcher gave up
        for i, row in zip(todo, generated, strict=True):
            rows[i] = row
        self._remember({**learned, **report.learned})
        return [rows[i] for i in range(len(prompts))], report.to_dict()

    def _learned(self) -> dict[int, int]:
        if not self.lake.exists(self.learned_key):
            return {}
        return {int(k): int(v) for k, v in self.lake.get_json(self.learned_key).items()}

    def _remember(self, sizes: dict[int, int]) -> None:
        # Last writer wins: shards running side by side learn the same thing; a stale value only costs a few grows.
        self.lake.put_json(self.learned_key, {str(k): v for k, v in sorted(sizes.items())})
