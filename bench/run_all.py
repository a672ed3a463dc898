"""``make bench``: every benchmark in turn, each one's wall time recorded, then the one table.

    python -m bench.run_all [--full | --gpu] [--only loading_bench precision_bench ...]

Three profiles of the same scripts. The standard one (``make bench``) is cut towards issue 20's 25 minutes on 2
cores (docs/benchmarks.md: what it took on which host): every comparison, every row a median of 3 runs alternating
the alternatives, at two data sizes, but smaller sizes and budgets than the scripts' own defaults, and no work
that decides no verdict: fp16 is not probed on a CPU (the pipeline cannot train it there), B6 takes the shipped demo
model instead of training one, B3 screens out baselines far off after one run, B1's attention sweep stops at 128,
and B3 and B5 train in a few torchrun launches each (``bench/train_session.py``), not one per run.
``--full`` (``make bench-full``, about an hour on a fast host) runs the scripts' defaults: the sizes and budgets
the docs' benchmark page describes. The table shows each row's size.
``--gpu`` (``make bench-gpu``, a few minutes on one GPU) is the GPU section: B2's training loop, B1's attention
workload under the allocator's budget, B6's variants where they serve and B8's configurations, on CUDA; results in
``bench/results/gpu/`` (``$AIGC_BENCH_RESULTS``), beside the CPU ones, its times in ``bench_times.json`` there.
Without CUDA it says so and stops. B5 (2 ranks against 1) is not in it: it needs two GPUs, and has no GPU form yet.

The times go to ``bench/results/bench_times.json``, per profile: each script's latest, their sum (what one run of
the profile takes) and, after a run of every script, that run's own wall time. A script that fails stops the run
with its exit status.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.paths import GPU

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "bench_times.json"


@dataclasses.dataclass(frozen=True)
class Bench:
    script: str
    standard: tuple[str, ...]  # make bench: the smaller sizes and budgets
    full: tuple[str, ...] = ()  # make bench-full: beyond the script's defaults
    gpu: tuple[str, ...] | None = None  # make bench-gpu: its CUDA flags (None: not in the GPU section)

    @property
    def name(self) -> str:
        return self.script.removesuffix(".py")


CPU_PRECISIONS = ("32/fp32", "32/bf16", "64/fp32", "64/bf16")
# In the order they run: the preparation benches first (they build the lakes the later ones reuse).
SCRIPTS: list[Bench] = [
    Bench("prepare_bench.py", ("--n", "10000", "--memory-n", "2000")),
    Bench("prepare_scaling.py", ("--sizes", "5000", "20000", "--repeats", "3"), ("--repeats", "3")),
    Bench("prepare_fanout.py", ("--parts", "1", "2")),
    Bench("loading_bench.py", ("--sizes", "500", "1500"),
          gpu=("--device", "cuda", "--feeding-only", "--sizes", "1500", "3000")),
    # train_bench's 1-vs-2-process table is left out of both: B5 (ddp_scaling) and B8 measure it better.
    Bench("train_bench.py", ("--only", "ddp_scaling", "balance", "--steps", "30"),
          ("--only", "ddp_scaling", "balance")),
    # contiguous and round-robin (the baselines), length-grouped (the strongest simple one), ours.
    Bench("balance_bench.py", ("--splits", "contiguous", "round_robin", "length_grouped", "balanced", "--steps", "6")),
    # fp16 on a CPU left out: the pipeline refuses to train it there, and its probe (no fast fp16 CPU kernels, 10-30x
    # slower) took two minutes of the six; the full profile probes it, the GPU one trains it.
    Bench("precision_bench.py", ("--steps", "150", "--probe-max-s", "4", "--configs", *CPU_PRECISIONS),
          gpu=("--device", "cuda", "--steps", "300", "--probe-max-s", "2")),
    Bench("batching_bench.py", ("--image-items", "500", "2000", "--attention-items", "2000", "8000"),
          gpu=("--workloads", "gpu", "--attention-items", "20000")),
    Bench("long_prompts_bench.py", ("--prompts", "16", "32", "--models", "text", "hf-causal-lm")),
    Bench("hf_generate_bench.py", ("--prompts", "64", "256", "1024")),
    Bench("hf_diffusion_bench.py", ("--prompts", "32", "128")),
    # The standard profile takes the demo model the project ships (the demo chain's own, registered and deployed
    # here in seconds; training one took most of B6's two minutes); the full one trains the demo's. The GPU one
    # trains on CUDA, in its own model folder: a model deployed by a CPU run names CPU devices for its variants.
    Bench("variants_bench.py", ("--shipped-model",), gpu=("--train-steps", "600", "--root", ".bench/variants-gpu")),
    Bench("pipeline_bench.py", ("--preset", "smoke", "--repeats", "3"), ("--preset", "smoke", "--repeats", "3")),
]
GOAL_S = {"standard": 25 * 60}


def flags_of(bench: Bench, profile: str) -> tuple[str, ...] | None:
    return {"standard": bench.standard, "full": bench.full, "gpu": bench.gpu}[profile]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--full", action="store_true", help="the scripts' default sizes and budgets (about an hour)")
    which.add_argument("--gpu", action="store_true", help="the GPU section (needs CUDA; results in bench/results/gpu)")
    ap.add_argument("--only", nargs="+", choices=[b.name for b in SCRIPTS], help="run these (default: all)")
    args = ap.parse_args()
    profile = "full" if args.full else "gpu" if args.gpu else "standard"
    in_profile = [b for b in SCRIPTS if flags_of(b, profile) is not None]
    if args.only and set(args.only) - {b.name for b in in_profile}:
        ap.error(f"not in the {profile} profile: {sorted(set(args.only) - {b.name for b in in_profile})}")
    chosen = [b for b in in_profile if not args.only or b.name in args.only]
    gpus = cuda_devices()
    if profile == "gpu":
        if not gpus:
            sys.exit("GPU section not run: no CUDA device here (torch.cuda.is_available() is False)")
        print(f"GPU section on {gpus} GPU(s); B5 (DDP scaling, 2 ranks against 1) is not in it: it has no GPU form "
              "yet", file=sys.stderr, flush=True)
    # The GPU section's times go with its results (its table reads them from there).
    times = RESULTS.parent / GPU.name / RESULTS.name if profile == "gpu" else RESULTS
    everything = json.loads(times.read_text()) if times.exists() else {}
    kept = everything.get(profile, {})
    seconds = dict(kept.get("seconds", {}))
    times.parent.mkdir(parents=True, exist_ok=True)

    def write(record: dict) -> None:
        times.write_text(json.dumps({**everything, profile: record}, indent=2) + "\n")

    gpu = bool(gpus)
    if not gpu:
        print("GPU section skipped: no CUDA device here (torch.cuda.is_available() is False). With one, "
              "`make bench-gpu` trains every B8 configuration on it (fp16 included), times each B6 variant where it "
              "serves, runs B1's attention workload under the allocator's budget and B2's training loop on the GPU.",
              file=sys.stderr, flush=True)
    # The GPU section's scripts write their results beside the CPU ones.
    env = {**os.environ, "AIGC_BENCH_RESULTS": str(GPU)} if profile == "gpu" else None
    started = time.perf_counter()
    for bench in chosen:
        flags = list(flags_of(bench, profile))
        print(f"\n=== {bench.script} {' '.join(flags)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", f"bench.{bench.name}", *flags], env=env, cwd=BENCH.parent)
        seconds[bench.name] = round(time.perf_counter() - t0, 1)
        write({**kept, "seconds": seconds})  # progress, if stopped
        if rc:
            sys.exit(f"{bench.script} failed with exit status {rc}")
    from bench.provenance import commit, machine  # the host's own description: hosts of "2 cores" differ 2x

    record = {**kept, "seconds": seconds, "gpu": gpu, "host": machine(), "commit": commit(),
              "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              # Every script's latest time: their sum is what one run of the profile takes, once each has a time.
              "total_s": round(sum(seconds.get(b.name, 0.0) for b in in_profile), 1),
              "missing": [b.script for b in in_profile if b.name not in seconds], "goal_s": GOAL_S.get(profile)}
    if len(chosen) == len(in_profile):
        record["one_run_s"] = round(time.perf_counter() - started, 1)
    elif "one_run_s" in record:  # a partial run makes the last whole run's figure stale
        record["one_run_s"] = None
    write(record)
    subprocess.check_call([sys.executable, "-m", "bench.summary", *(["--gpu"] if profile == "gpu" else [])],
                          cwd=BENCH.parent)
    print(json.dumps({"profile": profile, "seconds": seconds, "total_s": record["total_s"],
                      "one_run_s": record.get("one_run_s")}))


def cuda_devices() -> int:
    """How many CUDA devices PyTorch sees, asked in a child process: this one stays free of CUDA state."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True).stdout.strip()
    return int(out) if out.isdigit() else 0


if __name__ == "__main__":
    main()
