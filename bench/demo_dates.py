"""Does the demo pass on every date? The nightly chain of the demo preset, date after date, and gate 5's verdicts.

    python -m bench.demo_dates [--start 2026-11-01] [--days 14] [--lake DIR] [--workload text|hf-diffusion]

For each date, the same commands a user runs (``aigc make-raw``, ``prepare``, ``train``, ``deploy``,
``generate --demo-prompts``, ``evaluate``, all ``--preset demo``) on one lake, so each night trains a candidate
(from production's weights once there is a production: ``train.init_from``), and from the second date gate 5
compares it with production and with the best version that was ever production, on the same prompts and seeds.
Each date's checks are printed with their outcome, interval and looks; the last lines are the pass rate with its
95 % Wilson interval, how many candidates were promoted, and whether any promoted one was significantly worse than
the best production before it (the drift guard: never), as one JSON object (also written to
``bench/results/demo_dates.json``, or ``demo_dates_<workload>.json``). About 3 minutes a date on 2 cores for the
image demo.

Every check of gate 5 passes only on evidence (its interval's lower end clears a minimum, the upper end a maximum);
the two alignments draw more samples while undecided, up to ``evaluate.max_rounds`` looks, and each states the
error rates it is designed for (``aigc.evaluate.stats.design``), which this file records per date, with the grid
stage 5 drew (every eligible variant × batch policy: alignment, cost and the workload's other figures), each point
marked on or off the quality/cost front: the README's front table (``bench.summary``, block ``demo-front``) reads the
last date's. ``--workload hf-diffusion --days 1`` is the front over precision × denoising steps × scheduler.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aigc.evaluate.stats import wilson
from bench.provenance import write_results

HERE = Path(__file__).resolve().parent
AIGC = [sys.executable, "-m", "aigc", "--log-level", "WARNING"]
WORKLOAD = ["--workload", "image"]  # set by --workload
POINT_KEYS = ("variant", "policy", "alignment_ci", "vs_best", "as_good", "latency_ms", "latency_range_ms",
              "size_bytes", "fid", "clip_score", "score_vs_best", "feature_fid", "recommendation_looks")


def step(command: list[str], lake: str, date: str) -> tuple[int, dict]:
    """Run one ``aigc`` command of the demo for ``date``; (exit code, its JSON summary)."""
    out = subprocess.run([*AIGC, *command, "--preset", "demo", *WORKLOAD, "--lake", lake, "--date", date],
                         capture_output=True, text=True, env={**os.environ, "AIGC_PROGRESS": "0"})
    summary = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
    if out.returncode and command[0] != "evaluate":
        sys.exit(f"aigc {command[0]} failed for {date}: {out.stderr[-3000:]}")
    return out.returncode, summary


def one_date(lake: str, date: str) -> dict:
    started = time.perf_counter()
    trained = {}
    for command in (["make-raw"], ["prepare"], ["train"], ["deploy"], ["generate", "--demo-prompts"]):
        _, out = step(command, lake, date)
        trained = out if command == ["train"] else trained
    code, evaluated = step(["evaluate"], lake, date)
    from aigc.catalog import Catalog
    from aigc.lake import open_lake
    from aigc.stages import configure

    cfg = configure("demo", WORKLOAD[1])
    run = Catalog(open_lake(lake), cfg.prepare.dataset, cfg.model.name).evaluation_of(date)
    metrics = run["summary"]
    checks = metrics["gates"]["evaluation"]["checks"]  # gate 5's six checks; promotion is decided after
    pareto = open_lake(lake).get_json(f"{run['run_prefix']}/pareto.json")
    on_front = {(p["variant"], p["policy"]) for p in pareto["front"]}
    promotion = metrics.get("promotion") or {}
    worse_than_best = (metrics["intervals"].get("regression_vs_best") or {}).get("lo")
    return {"date": date, "passed": code == 0 and metrics["gates"]["evaluation"]["success"],
            "promoted": promotion.get("promote"), "promotion": promotion.get("reason"),
            "version": metrics["version"], "started_from": (trained.get("start") or {}).get("version"),
            "production_before": metrics.get("production_before"), "best_before": metrics.get("best_before"),
            "promoted_significantly_worse_than_best": bool(promotion.get("promote") and worse_than_best is not None
                                                           and worse_than_best > 0),
            "recommended": f"{metrics['recommended']['variant']}/{metrics['recommended']['policy']}",
            "checks": {c["check"]: {"passed": c["passed"], "outcome": c.get("outcome"), "observed": c["observed"],
                                    "looks": c.get("looks"), "designed": c.get("designed")} for c in checks},
            "rounds": max((e or {}).get("rounds", 1) for e in (metrics.get("evidence") or {None: None}).values()),
            "evidence": metrics.get("evidence"), "intervals": metrics["intervals"],
            # The grid stage 5 drew (every eligible variant × batch policy), each point marked on or off the front.
            "points": [{**{k: p[k] for k in POINT_KEYS if k in p},
                        "on_front": (p["variant"], p["policy"]) in on_front} for p in pareto["points"]],
            "seconds": round(time.perf_counter() - started, 1)}


def fmt(estimate: dict | None) -> str:
    if not estimate or estimate.get("value") is None:
        return "none"
    return f"{estimate['value']:.3f} [{estimate['lo']:.3f}, {estimate['hi']:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", default="2026-11-01", help="the first date (YYYY-MM-DD)")
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--lake", default=None, help="a folder for the lake (default: a temporary one)")
    ap.add_argument("--workload", default="image", help="image (default), text or hf-diffusion")
    args = ap.parse_args()
    WORKLOAD[1] = args.workload
    lake = args.lake or tempfile.mkdtemp(prefix="aigc-demo-dates-")
    first = dt.date.fromisoformat(args.start)
    results = []
    for i in range(args.days):
        date = (first + dt.timedelta(days=i)).isoformat()
        r = one_date(lake, date)
        results.append(r)
        iv = r["intervals"]
        failed = [f"{name} ({c['outcome']})" for name, c in r["checks"].items() if not c["passed"]]
        others = "  ".join(f"{name} {c['observed']}" for name, c in r["checks"].items()
                           if name not in ("content_alignment", "model_alignment"))
        print(f"{date} {r['version']} {'PASS' if r['passed'] else 'FAIL ' + ','.join(failed)}  "
              f"content {r['checks']['content_alignment']['observed']}  "
              f"model {r['checks']['model_alignment']['observed']}  {others}  "
              f"looks {r['rounds']}  from {r['started_from'] or 'scratch'}  → {r['recommended']}  "
              f"{'promoted' if r['promoted'] else 'not promoted'} (production − it: "
              f"{fmt(iv['regression_vs_production'])}; best − it: {fmt(iv.get('regression_vs_best'))})  "
              f"({r['seconds']:.0f} s)", flush=True)
        # Written after every date: a cut run keeps its dates.
        summary = summarise(args.start, lake, results, args.workload)
    print(f"\ngate 5 passed on {summary['passed']} of {summary['days']} consecutive dates "
          f"({wilson(summary['passed'], summary['days'])}); production moved on {summary['promoted']} of them "
          f"({summary['promoted_significantly_worse_than_best']} significantly worse than the best before); looks per "
          f"date {summary['rounds']}; recommended: {', '.join(summary['recommended'])}")
    print(json.dumps({k: v for k, v in summary.items() if k != "dates"}))


def summarise(start: str, lake: str, results: list[dict], workload: str = "image") -> dict:
    """The run so far as one JSON object, also written to ``bench/results/demo_dates.json``."""
    passed = sum(r["passed"] for r in results)
    promoted = sum(bool(r["promoted"]) for r in results)
    rate = wilson(passed, len(results))
    recommended = sorted({r["recommended"] for r in results})
    summary = {"bench": "demo_dates", "workload": workload, "start": start, "days": len(results), "passed": passed,
               "pass_rate": rate.to_dict(), "promoted": promoted,
               "promoted_significantly_worse_than_best": sum(r["promoted_significantly_worse_than_best"]
                                                             for r in results),
               "rounds": [r["rounds"] for r in results], "recommended": recommended, "lake": lake,
               "dates": results}
    (HERE / "results").mkdir(exist_ok=True)
    name = "demo_dates.json" if workload == "image" else f"demo_dates_{workload}.json"
    write_results(HERE / "results" / name, summary)
    return summary


if __name__ == "__main__":
    main()
