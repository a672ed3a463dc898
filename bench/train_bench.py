"""Stage 2 benchmark: training throughput by process count and precision, and shard balance.

    python -m bench.train_bench [--n 2000] [--steps 60] [--repeats 3]

1. Throughput: ``aigc train`` (torchrun, gloo) on one published demo partition with 1 and 2
   processes, fp32 and bf16 autocast; configurations alternate within each repeat, and the
   median over repeats of each run's median samples/s is reported, with wall time.
2. DDP scaling (B5): 2 ranks × 1 thread against 1 rank × 1 thread, same global batch, and with fp16
   gradient compression.
3. Balance: per-rank imbalance (max/mean − 1 of assigned cost, over the epoch and per step)
   of the cost-balanced plan and of a row-count split, on a long-tailed cost mix.

The last line is one JSON object with every figure (also written to bench/results/train.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from aigc.config import PipelineConfig, PrepareConfig, RawDropConfig, TrainConfig
from aigc.lake import open_lake
from aigc.lake.keys import partition
from aigc.lake.publish import NotPublished, resolve
from aigc.prepare import publish_prepared
from aigc.train.balance import balanced_plan, imbalance, naive_plan, step_imbalance
from aigc.train.launch import run_training
from aigc.workloads.image import prepare_image, sample_cost
from aigc.workloads.image.rawdrop import make_raw_drop
from bench.provenance import write_results
from bench.train_session import Run, alternating, launch

DATE = "2026-11-28"
RESULTS = Path(__file__).parent / "results" / "train.json"


def ensure_partition(root: Path, n: int):
    lake = open_lake(str(root))
    try:
        resolve(lake, partition("curated", "shapes", DATE))
    except NotPublished:
        make_raw_drop(lake.sub("raw/shapes"), DATE, RawDropConfig(n=n))
        summary = prepare_image(lake.sub("raw/shapes"), lake, DATE, PrepareConfig(workers=2))
        publish_prepared(lake, "shapes", DATE, summary["run_id"])
    return lake


def throughput(lake, steps: int, repeats: int) -> dict:
    configs = [(1, "fp32"), (2, "fp32"), (1, "bf16"), (2, "bf16")]
    runs: dict[str, list[tuple[float, float]]] = {f"{p}x{prec}": [] for p, prec in configs}
    for r in range(repeats):
        for nproc, precision in configs:
            train = dataclasses.replace(TrainConfig(), steps=steps, nproc=nproc, precision=precision,
                                        eval_every=steps, checkpoint_every=steps, warmup_steps=10)
            started = time.perf_counter()
            summary = run_training(lake, DATE, PipelineConfig(train=train), on_line=lambda _line: None)
            wall = time.perf_counter() - started
            runs[f"{nproc}x{precision}"].append((summary["median_samples_per_s"], wall))
            print(f"repeat {r + 1}: {nproc} process(es) {precision}: {summary['median_samples_per_s']:.0f} "
                  f"samples/s, {wall:.1f} s wall", file=sys.stderr)
    return {k: {"samples_per_s": round(statistics.median(s for s, _ in v), 1),
                "wall_s": round(statistics.median(w for _, w in v), 2)} for k, v in runs.items()}


def ddp_scaling(lake, steps: int, repeats: int) -> dict:
    """B5: samples/s of 2 ranks × 1 intra-op thread against 1 rank × 1 thread (gloo on the CPU), the same global
    batch, and 2 ranks with fp16 gradient compression (DDP's comm hook). One thread a rank, so the second process
    brings the second core and nothing else: the speed-up is DDP's. Every run in one torchrun launch of 2 ranks
    (bench/train_session.py), the configurations alternating in each repeat, each repeat in its own order; the
    1-rank run is rank 0 alone, a plain process (no process group, no DDP wrapper: the baseline at its strongest),
    while rank 1 waits at a barrier."""
    configs = {"1 rank x 1 thread": (1, "none"), "2 ranks x 1 thread": (2, "none"),
               "2 ranks x 1 thread, fp16 compression": (2, "fp16")}
    order = alternating(list(configs), range(repeats))
    sessions = []
    for name in order:
        nproc, compression = configs[name]
        train = dataclasses.replace(TrainConfig(), steps=steps, nproc=nproc, threads=1, grad_compression=compression,
                                    eval_every=steps, checkpoint_every=steps, warmup_steps=10)
        sessions.append(Run(PipelineConfig(train=train), solo=nproc == 1))
    runs: dict[str, list[float]] = {k: [] for k in configs}
    for name, summary in zip(order, launch(lake, DATE, 2, sessions), strict=True):
        runs[name].append(summary["median_samples_per_s"])
        print(f"B5 repeat {len(runs[name])}: {name}: {runs[name][-1]:.0f} samples/s", file=sys.stderr)
    base = statistics.median(runs["1 rank x 1 thread"])
    return {name: {"samples_per_s": round(statistics.median(v), 1), "min_max": [round(min(v), 1), round(max(v), 1)],
                   "runs": len(v), "vs_1_rank": round(statistics.median(v) / base, 3), "goal": ">= 1.7"}
            for name, v in runs.items()}


def balance() -> dict:
    rng = np.random.default_rng(0)
    side = rng.choice([32, 64, 128, 256], size=8192, p=[0.7, 0.2, 0.08, 0.02])
    costs = sample_cost(side * side, np.minimum(1 + rng.pareto(1.5, size=8192) * 6, 60).astype(int))
    out = {}
    for world, micro in ((2, 32), (4, 16), (8, 8)):
        b, n = balanced_plan(costs, world, micro, 0, 0), naive_plan(len(costs), world, micro, 0, 0)
        out[f"world{world}"] = {"balanced": [round(imbalance(costs, b), 5), round(step_imbalance(costs, b), 5)],
                                "naive": [round(imbalance(costs, n), 5), round(step_imbalance(costs, n), 5)]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="records in the demo drop")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--root", default=".bench/train", help="bench lake folder (kept between runs)")
    ap.add_argument("--only", nargs="+", default=["throughput", "ddp_scaling", "balance"],
                    choices=["throughput", "ddp_scaling", "balance"], help="sections to run (default: all)")
    args = ap.parse_args()
    lake = ensure_partition(Path(args.root).resolve(), args.n)
    sections = {"throughput": lambda: throughput(lake, args.steps, args.repeats),
                "ddp_scaling": lambda: ddp_scaling(lake, args.steps, args.repeats), "balance": balance}
    result = {name: run() for name, run in sections.items() if name in args.only}
    print("\nconfig      samples/s (median)   wall s", file=sys.stderr)
    for k, v in result.get("throughput", {}).items():
        print(f"{k:10s}  {v['samples_per_s']:>18.0f}   {v['wall_s']:>6.1f}", file=sys.stderr)
    print("\nB5, DDP on the CPU (global batch 64)       samples/s (min-max)    x 1 rank", file=sys.stderr)
    for k, v in result.get("ddp_scaling", {}).items():
        print(f"{k:40s}  {v['samples_per_s']:>6.0f} ({v['min_max'][0]:.0f}-{v['min_max'][1]:.0f})   "
              f"{v['vs_1_rank']:.2f}", file=sys.stderr)
    print("\nimbalance (epoch, per step)   balanced            naive", file=sys.stderr)
    for k, v in result.get("balance", {}).items():
        print(f"{k:28s}  {v['balanced'][0]:.4f}, {v['balanced'][1]:.4f}   {v['naive'][0]:.4f}, {v['naive'][1]:.4f}",
              file=sys.stderr)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}  # sections not run this time stay
    write_results(RESULTS, {**kept, **result})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
