"""Stage 1 benchmark: prepare's throughput against its bound, and its memory as the drop grows.

    python -m bench.prepare_bench [--n 20000] [--repeats 3] [--workers 2] [--resolution 32]

1. Throughput, side by side on one drop: rows/s of ``prepare`` and rows/s of only reading,
   decoding and hashing the same images with the same number of processes (the bound prepare
   works against). Runs alternate, medians are reported, and the ratio is taken per pair.
2. Memory: peak RSS (parent + decoding processes) of ``prepare`` in a fresh interpreter on
   drops of m and 10·m records (m ≥ PrepareConfig.window, so both fill the in-flight window).
   Flat means the ratio stays near 1 while the drop grows 10×.

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from PIL import Image

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import open_lake
from aigc.prepare.drop import drop_prefix
from aigc.workloads.image import prepare_image
from aigc.workloads.image.config import ImageSettings
from aigc.workloads.image.rawdrop import make_raw_drop

DATE = "2026-11-28"
BATCH = 256


def _decode_and_hash(blobs: list[bytes]) -> int:
    limit = ImageSettings().max_image_pixels
    ok = 0
    for data in blobs:
        hashlib.sha256(data).hexdigest()
        try:
            img = Image.open(io.BytesIO(data))
            if img.width * img.height <= limit:  # any real decoder has a bomb guard; prepare's is this one
                img.load()
                ok += 1
        except Exception:  # noqa: BLE001 - dirty images are part of the drop; the bound decodes what it can
            pass
    return ok


def bound_rows_per_s(raw, n_records: int, workers: int) -> float:
    """Read every image object of the drop, decode and hash it in ``workers`` processes."""
    drop = raw.sub(drop_prefix(DATE))
    keys = [k for k in drop.list("images")]
    start = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=get_context("forkserver")) as pool:
        futures = [pool.submit(_decode_and_hash, [drop.get_bytes(k) for k in keys[i : i + BATCH]])
                   for i in range(0, len(keys), BATCH)]
        for f in futures:
            f.result()
    return n_records / (time.perf_counter() - start)


def prepare_rows_per_s(raw, lake, cfg: PrepareConfig, settings: ImageSettings) -> float:
    return prepare_image(raw, lake, DATE, cfg, settings=settings)["rows_per_s"]


# Decoding processes are forkserver grandchildren, invisible to RUSAGE_CHILDREN: sample the tree.
PEAK_RSS_PROBE = """
import json, sys, threading, time, psutil
from aigc.config import PrepareConfig
from aigc.lake import open_lake
from aigc.workloads.image import prepare_image
from aigc.workloads.image.config import ImageSettings
me, peak, done = psutil.Process(), {"total": 0, "parent": 0}, threading.Event()
def sample():
    while not done.is_set():
        procs = [me] + me.children(recursive=True)
        rss = 0
        for p in procs:
            try:
                rss += p.memory_info().rss
            except psutil.Error:
                pass
        peak["total"] = max(peak["total"], rss)
        peak["parent"] = max(peak["parent"], me.memory_info().rss)
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()
lake = open_lake(sys.argv[1])
cfg = PrepareConfig(workers=int(sys.argv[3]))
settings = ImageSettings(resolution=int(sys.argv[4]))
summary = prepare_image(lake.sub("raw/shapes"), lake, sys.argv[2], cfg, settings=settings)
done.set()
print(json.dumps({"rows": summary["input"], "total_mib": peak["total"] / 2**20, "parent_mib": peak["parent"] / 2**20}))
"""


def peak_rss(lake_uri: str, workers: int, resolution: int) -> dict:
    out = subprocess.run([sys.executable, "-c", PEAK_RSS_PROBE, lake_uri, DATE, str(workers), str(resolution)],
                         capture_output=True, text=True, check=True, env={**os.environ, "AIGC_PROGRESS": "0"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-n", type=int, default=5_000, help="records of the smaller memory drop")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--resolution", type=int, default=32, help="image side; decode cost grows with it")
    ap.add_argument("--out", default=".bench")
    args = ap.parse_args()
    root = Path(args.out).resolve() / f"r{args.resolution}"

    lake = open_lake(str(root / "throughput"))
    raw = lake.sub("raw/shapes")
    print(f"making a {args.n}-record drop …", file=sys.stderr)
    make_raw_drop(raw, DATE, RawDropConfig(n=args.n, seed=1), args.resolution)
    cfg, settings = PrepareConfig(workers=args.workers), ImageSettings(resolution=args.resolution)
    bound, prep, ratios = [], [], []
    for i in range(args.repeats):
        b = bound_rows_per_s(raw, args.n, args.workers)
        p = prepare_rows_per_s(raw, lake, cfg, settings)
        bound.append(b)
        prep.append(p)
        ratios.append(p / b)
        print(f"run {i + 1}: decode+hash bound {b:,.0f} rows/s, prepare {p:,.0f} rows/s, ratio {p / b:.2f}",
              file=sys.stderr)

    memory = {}
    for n in (args.memory_n, 10 * args.memory_n):
        mem_lake = open_lake(str(root / f"memory-{n}"))
        make_raw_drop(mem_lake.sub("raw/shapes"), DATE, RawDropConfig(n=n, seed=2), args.resolution)
        memory[n] = peak_rss(mem_lake.uri, args.workers, args.resolution)
        print(f"peak RSS at {n} records: {memory[n]['total_mib']:.0f} MiB in all processes, "
              f"{memory[n]['parent_mib']:.0f} MiB in the parent", file=sys.stderr)
    small, large = memory[args.memory_n], memory[10 * args.memory_n]
    result = {
        "bench": "prepare", "records": args.n, "resolution": args.resolution, "workers": args.workers,
        "repeats": args.repeats,
        "bound_rows_per_s_median": round(statistics.median(bound)),
        "prepare_rows_per_s_median": round(statistics.median(prep)),
        "ratio_median": round(statistics.median(ratios), 3), "goal_ratio": 0.5,
        "peak_rss_mib": {str(n): round(m["total_mib"]) for n, m in memory.items()},
        "peak_rss_growth_for_10x_records": round(large["total_mib"] / small["total_mib"], 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
