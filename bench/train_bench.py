"""Stage 2 benchmark: training throughput by process count and precision, and shard balance.

    python bench/train_bench.py [--n 2000] [--steps 60] [--repeats 3]

1. Throughput: ``aigc train`` (torchrun, gloo) on one published demo partition with 1 and 2
   processes, fp32 and bf16 autocast; configurations alternate within each repeat, and the
   median over repeats of each run's median samples/s is reported, with wall time.
2. Balance: per-rank imbalance (max/mean − 1 of assigned cost, over the epoch and per step)
   of the cost-balanced plan and of a row-count split, on a long-tailed cost mix.

The last line is one JSON object with every figure.
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
from aigc.prepare import make_raw_drop, prepare, publish_prepared
from aigc.train.balance import balanced_plan, imbalance, naive_plan, sample_cost, step_imbalance
from aigc.train.launch import run_training

DATE = "2026-11-28"


def ensure_partition(root: Path, n: int):
    lake = open_lake(str(root))
    try:
        resolve(lake, partition("curated", "shapes", DATE))
    except NotPublished:
        make_raw_drop(lake.sub("raw/shapes"), DATE, RawDropConfig(n=n))
        summary = prepare(lake.sub("raw/shapes"), lake, DATE, PrepareConfig(workers=2))
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
    args = ap.parse_args()
    lake = ensure_partition(Path(args.root).resolve(), args.n)
    result = {"throughput": throughput(lake, args.steps, args.repeats), "balance": balance()}
    print("\nconfig      samples/s (median)   wall s", file=sys.stderr)
    for k, v in result["throughput"].items():
        print(f"{k:10s}  {v['samples_per_s']:>18.0f}   {v['wall_s']:>6.1f}", file=sys.stderr)
    print("\nimbalance (epoch, per step)   balanced            naive", file=sys.stderr)
    for k, v in result["balance"].items():
        print(f"{k:28s}  {v['balanced'][0]:.4f}, {v['balanced'][1]:.4f}   {v['naive'][0]:.4f}, {v['naive'][1]:.4f}",
              file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
