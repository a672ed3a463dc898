"""Stage 1 at growing drop sizes: does throughput hold, does memory per kept row stay flat, are verdicts right?

    python -m bench.prepare_scaling [--sizes 5000 20000 100000] [--repeats 1] [--workers 2]

Per size, one dirty drop (``aigc make-raw``, dirt rate 0.1) in a local folder, then ``prepare`` in a fresh
interpreter, ``--repeats`` rounds over all sizes (medians, with min and max). Reported per size: rows/s, the
parent's peak RSS and its growth per kept row over the smallest size (the decoding processes are bounded by the
in-flight window and left out), near-duplicate candidates compared per input row, the dedup index's bytes per
kept row, and the verdicts against the drop's own record of what it planted (``_planted.json``, written by the
generator, never read by prepare):

- recall: planted near-duplicates removed as near (or exact) duplicates;
- removals of other records, split into those whose caption names the same scene as the original they were
  matched with (two renders of one caption that came out nearly alike: duplicates in fact) and the rest (wrong);
- the lowest estimated similarity of any removal, which must not be below the configured threshold.

1M records need about 5.5 GB of disk and 17 minutes to write here: pass ``--sizes ... 1000000`` to include
them, and ``--workdir DIR`` to keep the drops there and reuse them on the next run (a drop is written only once).
The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import open_lake
from aigc.prepare.drop import SUCCESS, drop_prefix
from aigc.workloads.image.rawdrop import PLANTED, make_raw_drop
from bench.provenance import write_results

DATE = "2026-11-28"
RESULTS = Path(__file__).parent / "results" / "prepare_scaling.json"

# A fresh interpreter per run: the parent's peak RSS is then this run's alone.
PROBE = f"""
import json, resource, sys
from aigc.config import PrepareConfig
from aigc.lake import open_lake
from aigc.workloads.image import prepare_image
root, workers = sys.argv[1], int(sys.argv[2])
lake = open_lake(root)
summary = prepare_image(lake.sub("raw/shapes"), lake.sub("lake"), "{DATE}", PrepareConfig(workers=workers))
summary["parent_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(summary))
"""


def run_prepare(root: str, workers: int) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, root, str(workers)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def verdicts(root: str, summary: dict) -> dict:
    """Prepare's duplicate verdicts against what the generator planted."""
    import pyarrow.dataset as ds

    lake = open_lake(root)
    planted = lake.sub("raw/shapes").get_json(f"{drop_prefix(DATE)}/{PLANTED}")
    near_planted = {rec_id for rec_id, _ in planted.get("near_duplicate", [])}
    quarantine = ds.dataset(summary["quarantine_uri"].removeprefix("file://"), format="parquet")
    rows = quarantine.to_table(columns=["id", "reason", "detail", "raw"]).to_pylist()
    removed = {r["id"]: r for r in rows if r["reason"] in ("near_duplicate", "exact_duplicate")}
    near = [r for r in rows if r["reason"] == "near_duplicate"]
    captions = _captions(lake)
    other_same_scene = other_wrong = 0
    similarities, wrong = [], []
    for r in near:
        original = r["detail"].split("'")[1]
        similarities.append(float(re.search(r"estimated similarity ([0-9.]+)", r["detail"]).group(1)))
        if r["id"] in near_planted:
            continue
        if _scene(captions.get(r["id"], [""])[0]) in {_scene(c) for c in captions.get(original, [""])}:
            other_same_scene += 1
        else:
            other_wrong += 1
            wrong.append(f"{captions.get(r['id'])!r} removed as a copy of {captions.get(original)!r}: {r['detail']}")
    missed = sorted(rec_id for rec_id in near_planted if rec_id not in removed)
    return {"planted_near": len(near_planted),
            "recall": round(1 - len(missed) / len(near_planted), 4) if near_planted else None,
            "removed_near": len(near), "other_same_scene": other_same_scene, "other_wrong": other_wrong,
            "min_similarity": min(similarities) if similarities else None, "wrong_examples": wrong[:5],
            "missed_examples": [f"{m!r} ({captions.get(m)!r})" for m in missed[:5]]}


def _captions(lake) -> dict[str, list[str]]:
    """id → the captions of the records that carried it, in drop order (a planted reuse gives an id two)."""
    raw = lake.sub("raw/shapes").sub(drop_prefix(DATE))
    out = {}
    for key in raw.list("", recursive=False):
        if key.endswith(".jsonl"):
            for line in raw.iter_lines(key):
                try:
                    record = json.loads(line)
                    out.setdefault(record["id"], []).append(record["caption"])
                except (ValueError, KeyError, TypeError):
                    continue
    return out


def _scene(caption: str) -> str:
    """A caption reduced to the scene it names (case, punctuation and the copies' 'corner' dropped)."""
    words = re.findall(r"[a-z]+", caption.lower())
    return " ".join(w for w in words if w != "corner")


@contextlib.contextmanager
def _root(workdir: str | None, n: int):
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix=f"prepare-scaling-{n}-") as root:
            yield root
        return
    root = Path(workdir) / f"drop-{n}"
    root.mkdir(parents=True, exist_ok=True)
    yield str(root)


def _row(n: int, runs: list[dict], root: str) -> dict:
    last = runs[-1]
    dedup = last["dedup"]
    row = {
        "records": n, "kept": last["curated"], "runs": len(runs),
        "rows_per_s": statistics.median(r["rows_per_s"] for r in runs),
        "rows_per_s_min_max": [min(r["rows_per_s"] for r in runs), max(r["rows_per_s"] for r in runs)],
        "parent_peak_rss_mib": round(statistics.median(r["parent_peak_rss"] for r in runs) / 2**20, 1),
        "candidates_per_row": round(dedup["near_candidates"] / n, 2),
        "index_bytes_per_kept_row": round(dedup["index_bytes"] / max(1, last["curated"]), 1),
        **verdicts(root, last),
    }
    print(json.dumps(row), file=sys.stderr)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000, 100000])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default=None, help="keep the drops here and reuse them (default: a temporary "
                                                        "folder, deleted at the end)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        roots = {n: stack.enter_context(_root(args.workdir, n)) for n in args.sizes}
        for n, root in roots.items():
            raw = open_lake(root).sub("raw/shapes")
            if raw.exists(f"{drop_prefix(DATE)}/{SUCCESS}"):
                print(f"{n:>9,} records: reusing the drop in {root}", file=sys.stderr)
            else:
                started = time.perf_counter()
                make_raw_drop(raw, DATE, RawDropConfig(n=n, seed=11, dirt_rate=0.1))
                print(f"{n:>9,} records: drop written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        # Rounds over every size, so the machine's drift (it is shared) falls on all sizes alike.
        runs: dict[int, list[dict]] = {n: [] for n in args.sizes}
        for _ in range(args.repeats):
            for n, root in roots.items():
                open_lake(root).delete_prefix("lake")  # earlier runs' outputs: not history
                runs[n].append(run_prepare(root, args.workers))
                print(f"{n:>9,} records: {runs[n][-1]['rows_per_s']:,.0f} rows/s", file=sys.stderr)
        rows = [_row(n, runs[n], roots[n]) for n in args.sizes]
    base = rows[0]
    for row in rows[1:]:
        grown = row["kept"] - base["kept"]
        row["parent_bytes_per_kept_row"] = round((row["parent_peak_rss_mib"] - base["parent_peak_rss_mib"]) * 2**20
                                                 / grown, 1) if grown > 0 else None
    threshold = PrepareConfig().near_dup_threshold
    print(f"\n{'records':>9} {'rows/s':>8} {'parent MiB':>10} {'B/kept row':>10} {'cand/row':>8} {'index B/row':>11} "
          f"{'recall':>7} {'same-scene':>10} {'wrong':>5} {'min sim':>7}")
    for r in rows:
        print(f"{r['records']:>9,} {r['rows_per_s']:>8,.0f} {r['parent_peak_rss_mib']:>10} "
              f"{r.get('parent_bytes_per_kept_row') or '':>10} {r['candidates_per_row']:>8} "
              f"{r['index_bytes_per_kept_row']:>11} {r['recall']:>7} {r['other_same_scene']:>10} "
              f"{r['other_wrong']:>5} {r['min_similarity']:>7}")
    ratio = rows[-1]["rows_per_s"] / rows[0]["rows_per_s"] if len(rows) > 1 else None
    summary = {"bench": "prepare_scaling", "workers": args.workers, "threshold": threshold, "sizes": rows,
               "rows_per_s_largest_over_smallest": round(ratio, 3) if ratio else None,
               "no_removal_below_threshold": all(r["min_similarity"] is None or r["min_similarity"] >= threshold
                                                 for r in rows)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_results(RESULTS, summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
