"""Do reviewers' labels make the next model better, and does the active queue beat a random one? Two nights of the
image demo, three ways.

    python -m bench.review_loop [--date 2026-11-01] [--error-rate 0.1] [--prompts 512] [--review-items 96]
                                [--upweight 8] [--eval-prompts 512] [--steps N] [--lake DIR]

Night 1 runs the demo's chain (``aigc make-raw``, ``prepare``, ``train``, ``deploy``, ``generate --demo-prompts``,
``evaluate``, all ``--preset demo``; ``--prompts`` demo prompts) with ``--review-items`` of its outputs queued for
review the active way (the least certain first: ``evaluate.review_selection=uncertain``); a copy of that lake
evaluates the night again with as many drawn at random (``review_selection=random``). Each queue goes out as Label
Studio tasks (``aigc review export``), is labelled by simulated reviewers and comes back as Label Studio's JSON
export through the inbox (``aigc review import``), as a real round would.

The simulated reviewer's truth is the reference world's reader: the checker's verdict on the output and on each
attribute (the queue line's ``checker_correct`` and ``checker_attributes``; it reads the world's own renderings at
≥ 99 %, ``checker_accuracy`` in every report, but on generated images, and on the least certain ones most, it is a
stand-in for the truth, not the truth), each flipped with probability ``--error-rate`` (seeded). So these labels
cannot show the checker wrong, and the comparison of the active and the random queue measures which outputs' labels
help the next model, not which find the checker's mistakes.

Night 2 then trains three candidates from the same production, on the same window, with the same seeds: none (no
labels: ``train.review_feedback=off``), active (the uncertain queue's labels) and random (the random queue's), the
last two with ``review_feedback=upweight``. Each is deployed and answers the same ``--eval-prompts`` evaluation
prompts and seeds (stage 5's own set); the checker judges each answer. The result is the paired difference in
alignment (active − none, random − none, active − random) with its 95 % interval, which says whether the labels or
the selection made a significant difference (the interval excludes 0) or none detectable at this size, and what
each training run's manifest recorded of the labels (``review_labels``). Written to
``bench/results/review_loop.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from bench.demo_dates import step
from bench.provenance import write_results

HERE = Path(__file__).resolve().parent
MODEL = "shapes-cvae"
ARMS = ("none", "active", "random")
TRAIN = ["train", "--max-imbalance", "1"]
"""Gate 2's balance check is not what this measures, and a busy host fails it by chance: every night may pass it."""


def simulated_export(tasks: list[dict], queue: dict[str, dict], error_rate: float, rng: random.Random) -> list:
    """Label Studio's JSON export of ``tasks`` (the ones ``aigc review export`` wrote), each annotated by a reviewer
    who reads the truth (the queue's ``checker_read`` of every attribute) and errs at ``error_rate``."""
    def said(right: bool) -> str:
        return ("wrong" if right else "right") if rng.random() < error_rate else ("right" if right else "wrong")

    out = []
    for n, task in enumerate(tasks):
        line = queue[task["data"]["prompt_id"]]
        truth = line.get("checker_attributes") or {}
        regions = [("verdict", said(bool(line["checker_correct"])))] + [(f"attribute_{a}", said(bool(v)))
                                                                        for a, v in sorted(truth.items())]
        out.append({"id": n + 1, "data": task["data"], "predictions": task.get("predictions", []),
                    "annotations": [{"id": 1000 + n, "completed_by": 1, "was_cancelled": False,
                                     "result": [{"from_name": name, "to_name": "output", "type": "choices",
                                                 "value": {"choices": [choice]}, "origin": "manual"}
                                                for name, choice in regions]}]})
    return out


def label_round(lake: str, date: str, evaluation_run: str, error_rate: float, seed: int) -> dict:
    """Export the run's queue, label it as the simulated reviewers would, import the labels through the inbox."""
    from aigc.evaluate.labelstudio import inbox, read_queue
    from aigc.lake import key_in, open_lake

    _, exported = step(["review", "export", "--evaluation-run", evaluation_run], lake, date)
    the_lake = open_lake(lake)
    tasks = the_lake.get_json(key_in(the_lake, exported["tasks_uri"]))
    queue = read_queue(the_lake, MODEL, date, evaluation_run)
    export = simulated_export(tasks, queue, error_rate, random.Random(seed))
    the_lake.put_bytes(f"{inbox(MODEL)}/simulated-{evaluation_run}.json", json.dumps(export).encode())
    _, imported = step(["review", "import"], lake, date)
    wrong = sum(t["annotations"][0]["result"][0]["value"]["choices"] == ["wrong"] for t in export)
    return {"queued": len(tasks), "labelled_wrong": wrong, "imported": imported.get("labels")}


def alignment(lake: str, version: str, n: int) -> list[bool]:
    """The version's fp32 answers to stage 5's first ``n`` evaluation prompts, each judged by the checker."""
    from aigc.lake import open_lake
    from aigc.registry.loader import load_serving
    from aigc.stages import configure
    from aigc.workloads import workload_of
    from aigc.workloads.image.evaluation import evaluation_prompts
    from aigc.workloads.image.grid import variant_quality

    cfg = configure("demo", "image")
    serving = load_serving(open_lake(lake), MODEL, version, "fp32", "cpu", workload_of(cfg).serving)
    return variant_quality(serving, evaluation_prompts(n, cfg.evaluate.seed), None, 0.95)["verdicts"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--date", default="2026-11-01", help="night 1 (night 2 is the day after)")
    ap.add_argument("--error-rate", type=float, default=0.1, help="how often a simulated reviewer errs")
    ap.add_argument("--review-items", type=int, default=96, help="outputs queued for review on night 1")
    ap.add_argument("--prompts", type=int, default=512,
                    help="demo prompts night 1 answers, of which the queues are drawn (more than --review-items)")
    ap.add_argument("--upweight", type=int, default=8, help="train.review_upweight of the labelled nights")
    ap.add_argument("--eval-prompts", type=int, default=512, help="evaluation prompts each candidate answers")
    ap.add_argument("--steps", type=int, default=None,
                    help="training steps of both nights (default: the demo's); fewer leave a model labels can help")
    ap.add_argument("--lake", default=None, help="a folder for the lakes (default: a temporary one)")
    args = ap.parse_args()
    if args.review_items >= args.prompts:
        ap.error(f"--review-items {args.review_items} must be fewer than --prompts {args.prompts}: a queue of every "
                 "output is the same whichever way it is chosen")
    from aigc.evaluate.stats import paired_difference

    started = time.perf_counter()
    root = Path(args.lake or tempfile.mkdtemp(prefix="aigc-review-loop-"))
    night1, night2 = args.date, (dt.date.fromisoformat(args.date) + dt.timedelta(days=1)).isoformat()
    lakes = {arm: str(root / arm) for arm in ARMS}
    train = [*TRAIN, *(["--steps", str(args.steps)] if args.steps else [])]
    # Gate 5's minimum is not what this measures: a weak night (--steps) still queues, and its version is production.
    queue = ["--review-items", str(args.review_items), "--min-alignment", "0"]
    for command in (["make-raw"], ["prepare"], train, ["deploy"],
                    ["generate", "--demo-prompts", "--prompts", str(args.prompts)]):
        step(command, lakes["active"], night1)
    _, active_eval = step(["evaluate", *queue], lakes["active"], night1)
    print(f"night 1: {active_eval.get('version')} evaluated ({time.perf_counter() - started:.0f} s)", flush=True)
    for arm in ("none", "random"):
        shutil.copytree(lakes["active"], lakes[arm])
    _, random_eval = step(["evaluate", *queue, "--review-selection", "random"], lakes["random"], night1)
    rounds = {"active": label_round(lakes["active"], night1, active_eval["run_id"], args.error_rate, 1),
              "random": label_round(lakes["random"], night1, random_eval["run_id"], args.error_rate, 1)}
    print(f"labels: {rounds}", flush=True)

    arms = {}
    for arm in ARMS:
        feedback = ["--review-feedback", "off"] if arm == "none" else [
            "--review-feedback", "upweight", "--review-upweight", str(args.upweight)]
        for command in (["make-raw"], ["prepare"], [*train, *feedback]):
            _, out = step(command, lakes[arm], night2)
        trained = out
        _, deployed = step(["deploy"], lakes[arm], night2)
        verdicts = alignment(lakes[arm], deployed["version"], args.eval_prompts)
        arms[arm] = {"version": deployed["version"], "training_run": trained["run_id"],
                     "started_from": (trained.get("start") or {}).get("version"),
                     "review_labels": trained.get("review_labels"), "verdicts": verdicts,
                     "alignment": round(sum(verdicts) / len(verdicts), 4)}
        print(f"night 2, {arm}: alignment {arms[arm]['alignment']} on {len(verdicts)} evaluation prompts "
              f"({time.perf_counter() - started:.0f} s)", flush=True)

    def versus(a: str, b: str) -> dict:
        d = paired_difference(arms[a]["verdicts"], arms[b]["verdicts"], 0.95).to_dict()
        verdict = "better" if d["lo"] > 0 else "worse" if d["hi"] < 0 else "no significant difference"
        return {**d, "verdict": verdict}

    compared = {"labels_active_vs_none": versus("active", "none"), "labels_random_vs_none": versus("random", "none"),
                "active_vs_random": versus("active", "random")}
    result = {"bench": "review_loop", "nights": [night1, night2], "error_rate": args.error_rate,
              "review_items": args.review_items, "prompts": args.prompts, "upweight": args.upweight,
              "eval_prompts": args.eval_prompts,
              "steps": args.steps or "the demo's",
              "label_rounds": rounds, "compared": compared,
              "arms": {a: {k: v for k, v in r.items() if k != "verdicts"} for a, r in arms.items()},
              "note": "one training seed: the interval is over the evaluation prompts, not over training runs",
              "seconds": round(time.perf_counter() - started, 1)}
    write_results(HERE / "results" / "review_loop.json", result)
    for name, d in compared.items():
        print(f"{name}: {d['value']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]: {d['verdict']}")
    print(json.dumps({k: v for k, v in result.items() if k not in ("arms",)}))


if __name__ == "__main__":
    main()
