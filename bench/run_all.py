"""``make bench``: every benchmark in turn, each one's wall time recorded, then the one table.

    python bench/run_all.py [--only loading_bench precision_bench ...]

The times go to ``bench/results/bench_times.json``: each script's latest, their sum (what one ``make bench``
takes, checked in the table against issue 20's 25-minute goal) and, after a run of every script, that run's own
wall time. A script that fails stops the run with its exit status.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "bench_times.json"
# In the order they run: the preparation benches first (they build the lakes the later ones reuse).
SCRIPTS: list[list[str]] = [
    ["prepare_bench.py"],
    ["prepare_scaling.py", "--repeats", "3"],
    ["prepare_fanout.py"],
    ["loading_bench.py"],
    ["train_bench.py", "--only", "ddp_scaling", "balance"],  # its 1-vs-2-process table: B5 and B8 supersede it
    ["balance_bench.py"],
    ["precision_bench.py"],
    ["batching_bench.py"],
    ["long_prompts_bench.py"],
    ["variants_bench.py"],
    ["pipeline_bench.py", "--preset", "smoke", "--repeats", "3"],
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [s[0].removesuffix(".py") for s in SCRIPTS]
    ap.add_argument("--only", nargs="+", choices=names, help="run these (default: all)")
    args = ap.parse_args()
    chosen = [s for s in SCRIPTS if not args.only or s[0].removesuffix(".py") in args.only]
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    seconds = dict(kept.get("seconds", {}))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    gpu = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                         capture_output=True, text=True).stdout.strip() == "True"
    if not gpu:
        print("GPU section skipped: no CUDA device here (torch.cuda.is_available() is False). With one, B8 trains "
              "every configuration on it (fp16 included), B6 times each variant where it serves and B1 adds its "
              "GPU rows; B2 and B5 measure the CPU path only.", file=sys.stderr, flush=True)
    started = time.perf_counter()
    for script, *flags in chosen:
        print(f"\n=== {script} {' '.join(flags)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(BENCH / script), *flags])
        seconds[script.removesuffix(".py")] = round(time.perf_counter() - t0, 1)
        RESULTS.write_text(json.dumps({**kept, "seconds": seconds}, indent=2) + "\n")  # progress, if stopped
        if rc:
            sys.exit(f"{script} failed with exit status {rc}")
    record = {**kept, "seconds": seconds, "gpu": gpu, "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              # Every script's latest time: their sum is what one `make bench` takes, once each has a time.
              "total_s": round(sum(seconds.get(s[0].removesuffix(".py"), 0.0) for s in SCRIPTS), 1),
              "missing": [s[0] for s in SCRIPTS if s[0].removesuffix(".py") not in seconds]}
    if len(chosen) == len(SCRIPTS):
        record["one_run_s"] = round(time.perf_counter() - started, 1)
    elif "one_run_s" in record:  # a partial run makes the last whole run's figure stale
        record["one_run_s"] = None
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    subprocess.check_call([sys.executable, str(BENCH / "summary.py")])
    print(json.dumps({"seconds": seconds, "total_s": record["total_s"], "one_run_s": record.get("one_run_s")}))


if __name__ == "__main__":
    main()
