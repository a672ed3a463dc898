"""``make bench``: every benchmark in turn, each one's wall time recorded, then the one table.

    python bench/run_all.py [--full] [--only loading_bench precision_bench ...]

Two profiles of the same scripts. The standard one (``make bench``) is cut towards issue 20's 25 minutes on 2 cores
(not reached: 34 minutes on a fast 2-core host, 57 on a slow one, see the README): every comparison, every row a
median of 3 runs alternating the alternatives, at two data sizes, but smaller sizes and budgets than the scripts'
own defaults.
``--full`` (``make bench-full``, about an hour on a fast host) runs the scripts' defaults: the sizes and budgets
the README's sections quote. The table shows each row's size.

The times go to ``bench/results/bench_times.json``, per profile: each script's latest, their sum (what one run of
the profile takes) and, after a run of every script, that run's own wall time. A script that fails stops the run
with its exit status.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "bench_times.json"


@dataclasses.dataclass(frozen=True)
class Bench:
    script: str
    standard: tuple[str, ...]  # make bench: the smaller sizes and budgets
    full: tuple[str, ...] = ()  # make bench-full: beyond the script's defaults

    @property
    def name(self) -> str:
        return self.script.removesuffix(".py")


# In the order they run: the preparation benches first (they build the lakes the later ones reuse).
SCRIPTS: list[Bench] = [
    Bench("prepare_bench.py", ("--n", "10000", "--memory-n", "2000")),
    Bench("prepare_scaling.py", ("--sizes", "5000", "20000", "--repeats", "3"), ("--repeats", "3")),
    Bench("prepare_fanout.py", ("--parts", "1", "2")),
    Bench("loading_bench.py", ("--sizes", "500", "1500")),
    # train_bench's 1-vs-2-process table is left out of both: B5 (ddp_scaling) and B8 measure it better.
    Bench("train_bench.py", ("--only", "ddp_scaling", "balance", "--steps", "30"),
          ("--only", "ddp_scaling", "balance")),
    # contiguous and round-robin (the baselines), length-grouped (the strongest simple one), ours.
    Bench("balance_bench.py", ("--splits", "contiguous", "round_robin", "length_grouped", "balanced", "--steps", "6")),
    Bench("precision_bench.py", ("--steps", "150", "--probe-max-s", "4")),
    Bench("batching_bench.py", ("--image-items", "500", "2000", "--attention-items", "2000", "8000")),
    Bench("long_prompts_bench.py", ("--prompts", "16", "32")),
    Bench("variants_bench.py", ("--train-steps", "600")),
    Bench("pipeline_bench.py", ("--preset", "smoke", "--repeats", "3"), ("--preset", "smoke", "--repeats", "3")),
]
GOAL_S = {"standard": 25 * 60}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the scripts' default sizes and budgets (about an hour)")
    ap.add_argument("--only", nargs="+", choices=[b.name for b in SCRIPTS], help="run these (default: all)")
    args = ap.parse_args()
    profile = "full" if args.full else "standard"
    chosen = [b for b in SCRIPTS if not args.only or b.name in args.only]
    everything = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    kept = everything.get(profile, {})
    seconds = dict(kept.get("seconds", {}))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)

    def write(record: dict) -> None:
        RESULTS.write_text(json.dumps({**everything, profile: record}, indent=2) + "\n")

    gpu = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                         capture_output=True, text=True).stdout.strip() == "True"
    if not gpu:
        print("GPU section skipped: no CUDA device here (torch.cuda.is_available() is False). With one, B8 trains "
              "every configuration on it (fp16 included), B6 times each variant where it serves and B1 adds its "
              "GPU rows; B2 and B5 measure the CPU path only.", file=sys.stderr, flush=True)
    started = time.perf_counter()
    for bench in chosen:
        flags = list(bench.full if args.full else bench.standard)
        print(f"\n=== {bench.script} {' '.join(flags)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(BENCH / bench.script), *flags])
        seconds[bench.name] = round(time.perf_counter() - t0, 1)
        write({**kept, "seconds": seconds})  # progress, if stopped
        if rc:
            sys.exit(f"{bench.script} failed with exit status {rc}")
    sys.path.insert(0, str(BENCH))
    from summary import machine  # the table's own description of the host: hosts of "2 cores" differ 2x

    record = {**kept, "seconds": seconds, "gpu": gpu, "host": machine(),
              "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              # Every script's latest time: their sum is what one run of the profile takes, once each has a time.
              "total_s": round(sum(seconds.get(b.name, 0.0) for b in SCRIPTS), 1),
              "missing": [b.script for b in SCRIPTS if b.name not in seconds], "goal_s": GOAL_S.get(profile)}
    if len(chosen) == len(SCRIPTS):
        record["one_run_s"] = round(time.perf_counter() - started, 1)
    elif "one_run_s" in record:  # a partial run makes the last whole run's figure stale
        record["one_run_s"] = None
    write(record)
    subprocess.check_call([sys.executable, str(BENCH / "summary.py")])
    print(json.dumps({"profile": profile, "seconds": seconds, "total_s": record["total_s"],
                      "one_run_s": record.get("one_run_s")}))


if __name__ == "__main__":
    main()
