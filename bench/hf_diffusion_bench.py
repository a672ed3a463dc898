"""Generation throughput of the hf-diffusion workload's batcher against ``diffusers``' own pipeline call at fixed
batch sizes.

    python -m bench.hf_diffusion_bench [--repeats 5] [--prompts 32 128] [--steps 4] [--guidance 3]

The model is the workload's pixel demo base (IFPipeline, a two-level UNet at 32 px; random weights: time does not
depend on what it learnt), loaded by the workload's own serving code as a registered fp32 version serves it.
Prompts are the reference grammar's captions, each with its own seed. Policies, over the same prompts and seeds:

* ``pipeline_bK``: the pipeline's own call, ``pipe(prompt=[K captions], generator=[K generators seeded by the
  prompts' seeds], num_inference_steps, guidance_scale, output_type="np")``, on fixed batches of K in file order (K
  in a sweep that brackets its best; every prompt costs the same here, so sorting changes nothing); the best in
  hindsight is the baseline;
* ``ours``: the workload's serving under ``AdaptiveBatcher`` with the memory model of ``DiffusionServing.memory``
  and the host's memory budget, with the workload's batching settings, as stage 4 runs it (a size judged on one
  batch: ``batching.judge_batches``);
* ``ours_judge2``: the same with the core's default of two batches a judgement, which the workload's setting is
  measured against;
* ``ours_warm``: ``ours`` starting from the size a previous run learned (an untimed cold run before the repeats),
  as stage 4 starts a night's run from the last night's on the same version, variant and device class; it still
  re-probes the sizes next to it.

Repeats alternate the policies, each repeat starting one policy later; each cell is the median images/s (min, max);
``agreement`` is the share of images within one grey level of ``pipeline_b1``'s (same prompt, same seed). The
summary compares ours with the best fixed batch by the ratio of medians with the widest range the two ranges allow,
and paired by repeat (its median, range and the repeats it was faster in). Each other host's latest summary is kept
beside this run's. The last line is one JSON object, also written to ``bench/results/hf_diffusion.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bench.provenance import other_hosts, write_results
from bench.versus import versus_best_fixed

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "hf_diffusion.json"
SWEEP = (1, 2, 4, 8, 16, 32, 64)


def serving(steps: int, guidance: float):
    """The pixel demo base as a registered fp32 version would serve it (the workload's own loading code)."""
    from safetensors.torch import save

    from aigc.registry.variants import unshared
    from aigc.workloads.hf_diffusion.base import DEMO_PREFIX, fingerprint, load_pipeline, local_folder
    from aigc.workloads.hf_diffusion.serving import DiffusionServing

    folder = local_folder("", "pixel")
    card = {"diffusion": {"base_uri": f"{DEMO_PREFIX}pixel", "base": fingerprint(folder), "resolution": 32,
                          "inference_steps": steps, "guidance_scale": guidance}}
    weights = save(unshared(load_pipeline(folder).unet.state_dict()))
    return DiffusionServing(card, "fp32", weights, torch.device("cpu"), "bench")


@torch.no_grad()
def pipeline_fixed(s, prompts: list[str], seeds: list[int], k: int) -> np.ndarray:
    """The library's batched call on fixed batches of ``k`` prompts in file order, one generator per image."""
    out = []
    for i in range(0, len(prompts), k):
        images = s.pipe(prompt=prompts[i:i + k], num_inference_steps=s.steps, guidance_scale=s.guidance,
                        generator=[torch.Generator().manual_seed(x) for x in seeds[i:i + k]], height=s.resolution,
                        width=s.resolution, output_type="np", return_dict=False, **s.options)[0]
        out.append((np.clip(images, 0, 1) * 255).round().astype(np.uint8))
    return np.concatenate(out)


def ours(s, prompts: list[str], seeds: list[int], b, learned: dict | None = None) -> tuple[np.ndarray, dict]:
    """Stage 4's batcher with batching settings ``b`` (a ``BatchingConfig``), starting from ``learned`` sizes if
    given: (the images, the sizes it learned)."""
    from aigc.batching import AdaptiveBatcher, DeviceProbe

    items = [s.item({"prompt": p, "seed": x}) for p, x in zip(prompts, seeds, strict=True)]
    batcher = AdaptiveBatcher(lambda batch: list(s.run([items[i] for i in batch])), [0] * len(items), s.memory(),
                              DeviceProbe("cpu").budget_bytes, learned=learned, **b.batcher_options())
    images, report = batcher()
    return np.stack(images), report.learned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--guidance", type=float, default=3.0)
    args = ap.parse_args()
    from aigc.stages import configure
    from aigc.workloads.image.variants import smoke_prompts

    s = serving(args.steps, args.guidance)
    settings = configure("default", "hf-diffusion").batching  # the workload's, as stage 4 reads them
    rows, rates_of, learned_before = [], {}, {}
    for n in args.prompts:
        prompts, seeds = smoke_prompts(n, 0)
        sweep = [k for k in SWEEP if k <= n]
        last_night = learned_before[n] = ours(s, prompts, seeds, settings)[1]
        policies = {**{f"pipeline_b{k}": (lambda k=k, p=prompts, x=seeds: pipeline_fixed(s, p, x, k)) for k in sweep},
                    "ours": lambda p=prompts, x=seeds: ours(s, p, x, settings)[0],
                    "ours_judge2": lambda p=prompts, x=seeds: ours(s, p, x, replace(settings, judge_batches=2))[0],
                    "ours_warm": lambda p=prompts, x=seeds, before=last_night: ours(s, p, x, settings, before)[0]}
        reference = pipeline_fixed(s, prompts, seeds, 1).astype(np.int16)
        times: dict[str, list[float]] = {p: [] for p in policies}
        agreement: dict[str, float] = {}
        names = list(policies)
        for repeat in range(args.repeats):
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                t0 = time.perf_counter()
                images = policies[name]()
                times[name].append(time.perf_counter() - t0)
                close = np.abs(images.astype(np.int16) - reference).reshape(n, -1).max(axis=1) <= 1
                agreement[name] = float(close.mean())
        for name in policies:
            rates = rates_of[n, name] = [n / t for t in times[name]]
            rows.append({"prompts": n, "policy": name, "images_per_s": round(statistics.median(rates), 3),
                         "range": [round(min(rates), 3), round(max(rates), 3)],
                         "agreement_with_b1": round(agreement[name], 4), "repeats": args.repeats})
            print(f"{n:4d} prompts  {name:14s} {rows[-1]['images_per_s']:8.3f} images/s "
                  f"({rows[-1]['range'][0]}–{rows[-1]['range'][1]})  agreement {agreement[name]:.3f}",
                  file=sys.stderr)
    batchers = ("ours", "ours_judge2", "ours_warm")
    summary = [{**versus_best_fixed(rows, rates_of, n, "images_per_s", args.repeats, batchers),
                "learned_before": {str(k): v for k, v in learned_before[n].items()}} for n in args.prompts]
    result = {"bench": "hf_diffusion", "model": "hf-diffusion pixel demo base (IFPipeline, UNet 32/64 at 32 px)",
              "steps": args.steps, "guidance": args.guidance, "scheduler": s.scheduler, "rows": rows,
              "summary": summary, "threads": torch.get_num_threads(),
              "other_hosts": other_hosts(RESULTS, ("model", "steps", "guidance", "summary"))}
    write_results(RESULTS, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
