"""B2, multimodal loading: image–caption pairs as small objects against our Parquet shards, on S3 and a folder.

    python -m bench.loading_bench [--sizes 1000 3000] [--repeats 3] [--device cuda --feeding-only]

One demo drop per size is prepared (stage 1) into a folder lake and into a bucket of a local S3 server (moto,
loopback), and its curated images are also written the way a user without shards stores them: one PNG object
per image, captions in one index file. Two comparisons, alternating in each of ``--repeats`` rounds:

1. **Reading** batches of 64 (images decoded to float tensors, captions to ids) in one seeded random order:
   ``objects``: one GET per image, 16 threads at a time (the strongest simple loader: a request at a time is
   far slower); ``shards``: the training loop's own reader (``ImageTrainingTask.batch``: whole shards read
   and decoded once, kept in a bounded cache). From S3 and from the folder.
2. **Feeding the training loop**: the demo model's optimizer steps over the same batches from S3, with the
   images read from shards by the background thread (``train.data.Batches``, as training runs), read inline
   (no background decoder), and with no images at all (text-only: a zero image tensor, nothing read): the
   cost of the images to a training step. The seed measured 17× between image–text and text-only.

On a GPU (``--device cuda --feeding-only``, ``make bench-gpu``) the second comparison runs with the model on the
GPU, fed from the folder lake (no S3 server there): a GPU step is far quicker than a CPU one, so this is where the
loader has to keep up. The seed's 17× was measured on a GPU.

Goals (issue 20): shards ≥ 10× small objects on S3; image–text within 2× of text-only. The last line is one
JSON object, also written to ``bench/results/loading.json`` (or ``$AIGC_BENCH_RESULTS``).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bench.paths import results_path
from bench.provenance import write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = results_path("loading.json")
DATE = "2026-11-28"
BATCH = 64


def prepared(lake, n: int) -> None:
    from aigc.config import PrepareConfig, RawDropConfig
    from aigc.prepare import publish_prepared
    from aigc.workloads.image import prepare_image
    from aigc.workloads.image.rawdrop import make_raw_drop

    make_raw_drop(lake.sub("raw/shapes"), DATE, RawDropConfig(n=n, dirt_rate=0.0))
    summary = prepare_image(lake.sub("raw/shapes"), lake, DATE, PrepareConfig(workers=2))
    publish_prepared(lake, "shapes", DATE, summary["run_id"])


def folder_lake(root: Path, n: int, cfg):
    """The folder lake of ``n`` records, prepared once and kept (with its one-object-per-image copy)."""
    from aigc.lake import open_lake

    folder = open_lake(str(root / f"n{n}"))
    if not folder.exists("objects/index.json"):
        prepared(folder, n)
        write_objects(folder, task_of(folder, cfg)[1])
    return folder


def task_of(lake, cfg):
    from aigc.train.data import load_window
    from aigc.workloads import workload_of

    workload = workload_of(cfg)
    index = load_window(lake, cfg.prepare.dataset, DATE, 1, workload.index_columns)
    return workload.training_task(lake, index, cfg), index


def write_objects(lake, index) -> None:
    """Each curated image as its own object, captions (and ids) in one index: a loader without shards."""
    for key in index.shards:
        table = lake.parquet_file(key).read(columns=["id", "image"])
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda pair: lake.put_bytes(f"objects/{pair[0]}.png", pair[1]),
                          zip(table.column("id").to_pylist(), table.column("image").to_pylist(), strict=True)))
    lake.put_json("objects/index.json", {"ids": index.ids, "captions": index.columns["caption"]})


class ObjectLoader:
    """A batch: one GET and one PNG decode per image, ``threads`` at a time; captions from the index."""

    def __init__(self, lake, task, resolution: int, threads: int = 16):
        self.lake, self.task, self.resolution = lake, task, resolution
        self.ids = lake.get_json("objects/index.json")["ids"]
        self.pool = ThreadPoolExecutor(threads)

    def _image(self, i: int) -> np.ndarray:
        from PIL import Image

        img = Image.open(io.BytesIO(self.lake.get_bytes(f"objects/{self.ids[i]}.png"))).convert("RGB")
        if img.size != (self.resolution, self.resolution):
            img = img.resize((self.resolution, self.resolution), Image.Resampling.BILINEAR)
        return np.asarray(img)

    def batch(self, samples: np.ndarray):
        import torch

        images = np.stack(list(self.pool.map(self._image, samples.tolist())))
        return (torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0),
                self.task.tokens[torch.from_numpy(samples)])


def batches_of(n: int, seed: int = 0) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i:i + BATCH] for i in range(0, n - BATCH + 1, BATCH)]


def read_rate(make, batches) -> float:
    started = time.perf_counter()
    for b in batches:
        make(b)
    return sum(map(len, batches)) / (time.perf_counter() - started)


def feed_round(lake, cfg, batches, device: str, runs: dict[str, list[float]], tag: str) -> None:
    """One round of the training-loop comparison: each way of feeding it in turn, its samples/s into ``runs``."""
    for mode in ("background", "inline", "text-only"):
        runs.setdefault(f"loop {mode}", []).append(loop_rate(lake, cfg, mode, batches, device))
        print(f"{tag}: loop {mode:10s} {runs[f'loop {mode}'][-1]:8.0f} samples/s", file=sys.stderr)


def loop_rate(lake, cfg, mode: str, batches, device: str = "cpu") -> float:
    """Samples/s of optimizer steps fed ``mode``: "background" (as training runs), "inline", or "text-only".
    The batches move to ``device`` as the training loop moves them (``train.loop``)."""
    import torch

    from aigc.train.data import Batches

    task, _ = task_of(lake, cfg)  # a fresh reader: nothing cached from an earlier run
    torch.manual_seed(0)
    model = task.build_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    r = task.shape.resolution
    blank = torch.zeros(BATCH, 3, r, r)

    def step(batch) -> None:
        batch = tuple(x.to(device, non_blocking=True) for x in batch)
        task.loss(model, batch, train=True).total.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def synchronize() -> None:  # GPU work is queued: the clock stops when it has run
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    step((blank, task.tokens[torch.from_numpy(batches[0])]))  # warm-up (first-step allocations), nothing read
    synchronize()
    started = time.perf_counter()
    if mode == "background":
        feed = Batches(task.batch, batches, prefetch=cfg.train.prefetch_batches)
        for batch in feed:
            step(batch)
        feed.close()
    else:
        for b in batches:
            step(task.batch(b) if mode == "inline" else (blank[: len(b)], task.tokens[torch.from_numpy(b)]))
    synchronize()
    return sum(map(len, batches)) / (time.perf_counter() - started)


def summarise(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 1), "min_max": [round(min(values), 1), round(max(values), 1)],
            "runs": len(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--root", default=".bench/loading", help="folder lakes (kept between runs)")
    ap.add_argument("--device", default="cpu", help="where the training loop's model runs (cpu, cuda)")
    ap.add_argument("--feeding-only", action="store_true",
                    help="only the training-loop comparison, from the folder lake, at every size (the GPU section)")
    args = ap.parse_args()
    if args.feeding_only:
        return write(feeding_only(args.sizes, args.repeats, Path(args.root).resolve(), args.device))

    from aigc.devtools.s3server import local_s3
    from aigc.lake import S3Lake
    from aigc.stages import configure

    cfg = configure("demo", "image")
    reading: dict[str, dict] = {}
    feeding: dict[str, dict] = {}
    with local_s3() as s3:
        for n in args.sizes:
            folder = folder_lake(Path(args.root).resolve(), n, cfg)
            bucket = S3Lake(f"s3://{s3.bucket}/n{n}", s3.options())
            prepared(bucket, n)
            write_objects(bucket, task_of(bucket, cfg)[1])
            kept = len(task_of(folder, cfg)[1])
            batches = batches_of(kept)
            runs: dict[str, list[float]] = {}
            for r in range(args.repeats):
                for where, lake in (("s3", bucket), ("folder", folder)):
                    task, _ = task_of(lake, cfg)
                    for name, make in (("objects", ObjectLoader(lake, task, task.shape.resolution).batch),
                                       ("shards", task_of(lake, cfg)[0].batch)):
                        runs.setdefault(f"{where} {name}", []).append(read_rate(make, batches))
                        print(f"B2 n={kept} repeat {r + 1}: {where:6s} {name:7s} "
                              f"{runs[f'{where} {name}'][-1]:8.0f} samples/s", file=sys.stderr)
                if n == args.sizes[-1]:
                    feed_round(bucket, cfg, batches, args.device, runs, f"B2 n={kept} repeat {r + 1}")
            cell = {k: summarise(v) for k, v in runs.items()}
            reading[str(kept)] = {k: v for k, v in cell.items() if not k.startswith("loop")}
            for where in ("s3", "folder"):
                reading[str(kept)][f"{where} shards_vs_objects"] = round(
                    cell[f"{where} shards"]["median"] / cell[f"{where} objects"]["median"], 2)
            if "loop background" in cell:
                feeding = feeding_cell(kept, cell)
    goal_read = min(v["s3 shards_vs_objects"] for v in reading.values())
    goals = {"shards_vs_objects_on_s3": goal_read, "shards_goal_met": goal_read >= 10, **feeding_goal(feeding)}
    print("\nB2, loading (batches of 64, samples/s, median (min-max))", file=sys.stderr)
    for kept, row in reading.items():
        for k, v in row.items():
            text = f"{v:.2f}x" if isinstance(v, float) else f"{v['median']:.0f} ({v['min_max'][0]:.0f}-" \
                                                            f"{v['min_max'][1]:.0f})"
            print(f"{kept:>6s} samples  {k:26s} {text}", file=sys.stderr)
    for k, v in feeding.items():
        if isinstance(v, dict):
            print(f"training loop from S3, {k:18s} {v['median']:.0f} ({v['min_max'][0]:.0f}-{v['min_max'][1]:.0f})",
                  file=sys.stderr)
    print(f"goals: shards >= 10x objects on S3: {goal_read:.1f}x; text-only / image-text <= 2: "
          f"{goals['text_only_vs_image_text']}", file=sys.stderr)
    write({"bench": "loading", "batch": BATCH, "device": args.device, "lake": "S3", "reading": reading,
           "feeding": feeding, "goals": goals})


def feeding_cell(kept: int, cell: dict) -> dict:
    return {"samples": kept, **{k: v for k, v in cell.items() if k.startswith("loop")},
            "text_only_vs_image_text": round(cell["loop text-only"]["median"] / cell["loop background"]["median"], 2),
            "text_only_vs_inline": round(cell["loop text-only"]["median"] / cell["loop inline"]["median"], 2)}


def feeding_goal(feeding: dict) -> dict:
    return {"text_only_vs_image_text": feeding.get("text_only_vs_image_text"),
            "image_text_goal_met": (feeding.get("text_only_vs_image_text") or 99) <= 2}


def feeding_only(sizes: list[int], repeats: int, root: Path, device: str) -> dict:
    """The training-loop comparison alone, at every size, from folder lakes: the GPU section's B2."""
    from aigc.stages import configure

    cfg = configure("demo", "image")
    by_size: dict[str, dict] = {}
    for n in sizes:
        folder = folder_lake(root, n, cfg)  # the full comparison's lake (its objects are not read here)
        kept = len(task_of(folder, cfg)[1])
        batches = batches_of(kept)
        runs: dict[str, list[float]] = {}
        for r in range(repeats):
            feed_round(folder, cfg, batches, device, runs, f"B2 {device} n={kept} repeat {r + 1}")
        by_size[str(kept)] = feeding_cell(kept, {k: summarise(v) for k, v in runs.items()})
    feeding = by_size[max(by_size, key=int)]
    worst = max(by_size.values(), key=lambda f: f["text_only_vs_image_text"])
    for kept, f in by_size.items():
        print(f"B2 {device}, {kept} pairs: text-only / image-text {f['text_only_vs_image_text']:.2f}x "
              f"(inline {f['text_only_vs_inline']:.2f}x)", file=sys.stderr)
    return {"bench": "loading", "batch": BATCH, "device": device, "lake": "folder", "reading": {},
            "feeding": feeding, "feeding_by_size": by_size, "goals": feeding_goal(worst)}


def write(result: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_results(RESULTS, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
