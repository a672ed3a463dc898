"""B6, deployment variants side by side: latency, size and alignment of every variant on the device it serves on.

    python -m bench.variants_bench [--repeats 3] [--prompts 128] [--timing-prompts 256]

One demo model (``aigc make-raw``, ``prepare``, ``train``, ``deploy``, demo preset, kept under ``--root``; or with
``--shipped-model`` the demo model the project ships, ``tests/fixtures/demo_model``, the same chain's 1,500-step
model, registered and deployed in seconds without the training) and every variant gate 3 made of it (fp32, bf16,
pruned, int8 ONNX, …), each loaded on the device its
``variant.json`` names (where it serves: ``generate.run.serves_on``). Per variant:

* latency per image at batch 1 and under the adaptive batcher (the size it settled on is reported), over the
  same ``--timing-prompts`` prompts, every variant in turn within each of ``--repeats`` rounds: median (min–max);
* size on disk;
* alignment on ``--prompts`` evaluation prompts (the checker's all-attributes verdict, Wilson 95% interval) and
  the paired 95% interval of fp32 − variant on the same prompts and seeds: "not significantly lower" means it
  reaches 0 or below.

Goal (issue 20): int8 ≥ 1.5× faster than fp32 at an alignment not significantly lower. The last line is one
JSON object, also written to ``bench/results/variants.json`` (or ``$AIGC_BENCH_RESULTS``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.demo_model import DEMO_MODEL, install_demo_model
from bench.paths import results_path
from bench.provenance import write_results

RESULTS = results_path("variants.json")  # bench/results, or $AIGC_BENCH_RESULTS
DATE = "2026-11-28"
AIGC = str(Path(sys.executable).with_name("aigc"))


def shipped_steps() -> int:
    return json.loads((DEMO_MODEL / "_SUMMARY.json").read_text())["steps"]


def aigc(command: str, root: Path, *flags: str) -> dict:
    out = subprocess.run([AIGC, command, "--preset", "demo", "--lake", str(root), "--date", DATE, *flags],
                         capture_output=True, text=True, env={**os.environ, "AIGC_PROGRESS": "0"})
    if out.returncode:
        sys.exit(f"aigc {command} failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ensure_model(root: Path, train_steps: int | None, shipped: bool = False) -> str:
    """The version the demo chain registered (built once per training budget; a second run of the bench reuses it)."""
    marker = root / f"bench-version-{'shipped' if shipped else train_steps or 'demo'}.txt"
    if marker.exists():
        return marker.read_text().strip()
    if shipped:  # registered and deployed by the demo preset's own deploy and gate 3, on this host
        install_demo_model(root)
        marker.write_text("v0001")
        return "v0001"
    aigc("make-raw", root)
    aigc("prepare", root)
    aigc("train", root, *(["--steps", str(train_steps)] if train_steps else []))
    version = aigc("deploy", root)["version"]
    marker.write_text(version)
    return version


def timed(gen, policy: str, texts: list[str], seeds: list[int], max_batch: int) -> tuple[float, int]:
    """(ms per image, the batch size used) over ``texts``."""
    from aigc.batching import AdaptiveBatcher, MemoryModel

    started = time.perf_counter()
    if policy == "batch1":
        for t, s in zip(texts, seeds, strict=True):
            gen.generate([t], [s])
        size = 1
    else:
        def run(batch: list[int]) -> list:
            return list(gen.generate([texts[i] for i in batch], [seeds[i] for i in batch]).numpy())

        _, report = AdaptiveBatcher(run, [gen.config.resolution] * len(texts), MemoryModel(width=256),
                                    lambda: 1 << 34, max_batch=max_batch)()
        size = max(report.learned.values(), default=max(report.sizes))
    return (time.perf_counter() - started) * 1000 / len(texts), size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=128, help="evaluation prompts for alignment")
    # The batcher grows its batch as batches succeed: over 32 prompts it never got past 4 (20-50 ms of
    # work a variant, the noise floor of a shared host); over 256 it settles (32-64 here) and times what it serves.
    ap.add_argument("--timing-prompts", type=int, default=256)
    ap.add_argument("--train-steps", type=int, default=None,
                    help="optimizer steps of the model the variants are made of (default: the demo's)")
    ap.add_argument("--shipped-model", action="store_true",
                    help="the demo model the project ships (tests/fixtures/demo_model) instead of training one")
    ap.add_argument("--root", default=".bench/variants", help="bench lake folder (kept between runs)")
    args = ap.parse_args()
    if args.shipped_model and args.train_steps:
        ap.error("--shipped-model is the demo's trained model: it takes no --train-steps")
    root = Path(args.root).resolve() / ("shipped" if args.shipped_model else "")
    version = ensure_model(root, args.train_steps, args.shipped_model)

    from aigc.evaluate.stats import paired_difference, wilson
    from aigc.lake import open_lake
    from aigc.registry.store import Registry
    from aigc.stages import configure
    from aigc.workloads.image.metrics import assess
    from aigc.workloads.image.reference import evaluation_prompts
    from aigc.workloads.image.serving import Generator

    cfg = configure("demo", "image")
    lake = open_lake(str(root))
    record = Registry(lake, cfg.model.name).get(version)
    eligible = (record.get("smoke_test") or {}).get("eligible_variants") or list(record["variants"])
    gens = {v: Generator.load(lake, cfg.model.name, version, v, record["variants"][v].get("device", "cpu"))
            for v in eligible}

    prompts = evaluation_prompts(args.prompts, cfg.evaluate.seed)
    texts, seeds = [p["prompt"] for p in prompts], [p["seed"] for p in prompts]
    verdicts = {}
    for v, gen in gens.items():
        images = [im for lo in range(0, len(texts), 64)
                  for im in gen.generate(texts[lo:lo + 64], seeds[lo:lo + 64]).numpy()]
        verdicts[v] = [bool(r.get("all_correct")) for r in assess(images, texts)["rows"]]

    timing = evaluation_prompts(args.timing_prompts, cfg.evaluate.seed)
    timing_texts, timing_seeds = [p["prompt"] for p in timing], [p["seed"] for p in timing]
    for gen in gens.values():
        gen.generate(timing_texts[:2], timing_seeds[:2])  # warm-up: first-call allocations are not latency
    times: dict[tuple[str, str], list[tuple[float, int]]] = {(v, p): [] for v in gens for p in ("batch1", "adaptive")}
    for r in range(args.repeats):
        for (v, policy), runs in times.items():
            runs.append(timed(gens[v], policy, timing_texts, timing_seeds, cfg.batching.max_batch))
            print(f"B6 repeat {r + 1}: {v:7s} {policy:8s} {runs[-1][0]:.3f} ms/image (batch {runs[-1][1]})",
                  file=sys.stderr)

    def cell(v: str, policy: str) -> dict:
        ms = [t for t, _ in times[v, policy]]
        return {"ms_per_image": round(statistics.median(ms), 4), "min_max": [round(min(ms), 4), round(max(ms), 4)],
                "batch": statistics.median_low([b for _, b in times[v, policy]])}

    rows = {}
    for v in gens:
        align = wilson(sum(verdicts[v]), len(verdicts[v]))
        gap = paired_difference(verdicts["fp32"], verdicts[v])
        rows[v] = {"device": str(gens[v].device), "size_bytes": record["variants"][v]["size_bytes"],
                   "batch1": cell(v, "batch1"), "adaptive": cell(v, "adaptive"), "alignment": align.to_dict(),
                   "fp32_minus_variant": gap.to_dict(), "not_significantly_lower": gap.lo is None or gap.lo <= 0,
                   "runs": args.repeats}
    for row in rows.values():
        for policy in ("batch1", "adaptive"):
            row[f"speedup_vs_fp32_{policy}"] = round(rows["fp32"][policy]["ms_per_image"]
                                                     / row[policy]["ms_per_image"], 3)
    goal = None
    if "int8" in rows:
        i8 = rows["int8"]
        goal = {"int8_speedup_batch1": i8["speedup_vs_fp32_batch1"],
                "int8_speedup_adaptive": i8["speedup_vs_fp32_adaptive"],
                "alignment_not_significantly_lower": i8["not_significantly_lower"],
                "met": i8["not_significantly_lower"] and min(i8["speedup_vs_fp32_batch1"],
                                                             i8["speedup_vs_fp32_adaptive"]) >= 1.5}

    print(f"\nB6, variants of {version} ({args.prompts} prompts for alignment, {args.timing_prompts} timed, "
          f"{args.repeats} rounds)\nvariant  device  KiB     ms/image b1 (min-max)    ms/image adaptive (batch)   "
          "x fp32 b1/adaptive  alignment [95%]        fp32 - it [95%]", file=sys.stderr)
    for v, row in rows.items():
        a, g, b1, ad = row["alignment"], row["fp32_minus_variant"], row["batch1"], row["adaptive"]
        print(f"{v:8s} {row['device']:7s} {row['size_bytes'] / 1024:6.1f}  {b1['ms_per_image']:6.3f} "
              f"({b1['min_max'][0]:.3f}-{b1['min_max'][1]:.3f})    {ad['ms_per_image']:6.3f} ({ad['batch']})"
              f"                 {row['speedup_vs_fp32_batch1']:.2f}/{row['speedup_vs_fp32_adaptive']:.2f}"
              f"          {a['value']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}]   {g['value']:+.3f} "
              f"[{g['lo']:+.3f}, {g['hi']:+.3f}]", file=sys.stderr)
    if goal:
        print(f"goal int8 >= 1.5x fp32 at an alignment not significantly lower: {'met' if goal['met'] else 'MISSED'}",
              file=sys.stderr)
    trained = (f"the shipped demo model ({DEMO_MODEL.name})" if args.shipped_model
               else "trained here (make-raw, prepare, train, deploy)")
    result = {"bench": "variants", "version": version, "model": trained,
              "train_steps": shipped_steps() if args.shipped_model else args.train_steps or cfg.train.steps,
              "prompts": args.prompts, "timing_prompts": args.timing_prompts, "variants": rows, "goal": goal}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_results(RESULTS, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
