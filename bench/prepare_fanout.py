"""Stage 1 fanned out over 1, 2 and 4 workers, against the one-host run, side by side on the same drops.

    python -m bench.prepare_fanout [--sizes 5000 20000] [--repeats 3] [--parts 1 2 4]

What the DAG does with ``prepare.parts = N``, outside Airflow: plan the drop, run the N ``prepare_part`` calls
at once, each in its own fresh interpreter with one decoding process (a Celery worker slot on one core), then
merge. The baseline is the strongest simple alternative, the one-host ``prepare`` with one decoding process per
core (2 here), and with one. Per configuration: the median wall time (min–max) of ``--repeats`` runs, the
configurations alternating in each round, rows/s, and the merge's share. Every configuration must write the same
curated bytes (checked: the shards' SHA-256). Interpreter start-up counts, as a task's would (Airflow adds its own
task start-up on top: see B7 in issue 20). The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import open_lake
from aigc.prepare.fanout import merge_parts, plan_prepare
from aigc.procs import available_cpus
from aigc.workloads.image import IMAGE
from aigc.workloads.image.rawdrop import make_raw_drop
from bench.provenance import write_results

DATE = "2026-11-28"
RESULTS = Path(__file__).parent / "results" / "prepare_fanout.json"
PART = """
import json, sys
from aigc.config import PrepareConfig
from aigc.lake import open_lake
from aigc.prepare.fanout import prepare_part
from aigc.workloads.image import IMAGE
root, plan, index = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
lake = open_lake(root)
done = prepare_part(lake.sub("raw/shapes"), lake.sub(sys.argv[4]), plan, plan["parts"][index],
                    PrepareConfig(workers=1, parts=len(plan["parts"])), IMAGE.records(None))
print(json.dumps(done))
"""
ONE_HOST = """
import json, sys
from aigc.config import PrepareConfig
from aigc.lake import open_lake
from aigc.workloads.image import prepare_image
root, workers, out, date = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lake = open_lake(root)
print(json.dumps(prepare_image(lake.sub("raw/shapes"), lake.sub(out), date, PrepareConfig(workers=workers))))
"""


def one_host(root: str, workers: int, out: str) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", ONE_HOST, root, str(workers), out, DATE], capture_output=True,
                          text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout.strip().splitlines()[-1])


def fanned_out(root: str, parts: int, out: str) -> tuple[float, dict]:
    started = time.perf_counter()
    lake = open_lake(root)
    cfg = PrepareConfig(workers=1, parts=parts)
    plan = plan_prepare(lake.sub("raw/shapes"), lake.sub(out), DATE, cfg)

    def part(index: int) -> None:
        subprocess.run([sys.executable, "-c", PART, root, json.dumps(plan), str(index), out], capture_output=True,
                       text=True, check=True)

    with ThreadPoolExecutor(parts) as pool:
        list(pool.map(part, range(parts)))
    summary = merge_parts(lake.sub("raw/shapes"), lake.sub(out), plan, cfg, IMAGE.records(None), IMAGE.name)
    return time.perf_counter() - started, summary


def shards_of(root: str, summary: dict) -> list:
    lake = open_lake(root)
    key = summary["staging_uri"][len(lake.uri) + 1 :] + "/_manifest.json"
    return [s["sha256"] for s in lake.get_json(key)["shards"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    configs = [("one host, 2 processes", "host", 2), ("one host, 1 process", "host", 1),
               *((f"fan-out, {n} worker{'s' if n > 1 else ''}", "parts", n) for n in args.parts)]
    results = []
    with tempfile.TemporaryDirectory(prefix="aigc-fanout-") as tmp:
        for n in args.sizes:
            root = f"{tmp}/{n}"
            make_raw_drop(open_lake(root).sub("raw/shapes"), DATE, RawDropConfig(n=n, dirt_rate=0.1))
            times: dict[str, list[float]] = {name: [] for name, _, _ in configs}
            merges: dict[str, list[float]] = {name: [] for name, _, _ in configs}
            digests = set()
            for r in range(args.repeats):
                for i, (name, kind, k) in enumerate(configs):
                    out = f"out-{r}-{i}"
                    seconds, summary = one_host(root, k, out) if kind == "host" else fanned_out(root, k, out)
                    times[name].append(seconds)
                    if summary.get("fanout"):
                        merges[name].append(summary["fanout"]["merge_seconds"])
                    digests.add(tuple(shards_of(root, summary)))
            assert len(digests) == 1, "the configurations wrote different curated shards"
            base = statistics.median(times[configs[0][0]])
            for name, _, _ in configs:
                median = statistics.median(times[name])
                results.append({"records": n, "config": name, "runs": len(times[name]), "median_s": round(median, 2),
                                "min_s": round(min(times[name]), 2), "max_s": round(max(times[name]), 2),
                                "rows_per_s": round(n / median), "vs_one_host_2": round(base / median, 2),
                                "merge_s": round(statistics.median(merges[name]), 2) if merges[name] else None})
    print(f"{'records':>8} {'configuration':<24} {'runs':>4} {'median s (min–max)':>20} {'rows/s':>7} "
          f"{'× one host':>10} {'merge s':>8}")
    for row in results:
        span = f"{row['median_s']} ({row['min_s']}–{row['max_s']})"
        print(f"{row['records']:>8} {row['config']:<24} {row['runs']:>4} {span:>20} {row['rows_per_s']:>7} "
              f"{row['vs_one_host_2']:>10} {row['merge_s'] if row['merge_s'] is not None else '':>8}")
    RESULTS.parent.mkdir(exist_ok=True)
    write_results(RESULTS, results)
    print(json.dumps({"bench": "prepare_fanout", "cpus": available_cpus(), "results": results}))


if __name__ == "__main__":
    main()
