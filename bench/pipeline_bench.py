"""B7: the pipeline's wall time, split into stage work and Airflow's overhead.

    python -m bench.pipeline_bench [--preset smoke] [--repeats 3] [--modes cli,dags-test,scheduler]

Each repeat runs the whole pipeline for a date of its own, on a fresh local-folder lake, once in each mode;
the order of the modes rotates from repeat to repeat, so a busy neighbour on a shared host falls on each alike.

- ``cli``: the chain a user would run by hand, one ``aigc`` process per stage (make-raw, prepare, train,
  deploy, generate --demo-prompts --model-ref candidate, evaluate): the stage work, gates included, and
  Python start-up, no Airflow. The baseline.
- ``dags-test``: ``airflow dags test aigc_pipeline`` (what ``make demo`` runs): every task in one process,
  no scheduler.
- ``scheduler``: the same DAG triggered through the REST API of a running deployment (api-server, scheduler,
  dag-processor and triggerer as ``make airflow`` starts them; LocalExecutor on SQLite), each task a process
  of its own. The nightly stage DAGs are paused first, so the run measured is the only work.

For an Airflow run: its wall time (process start to exit for ``dags test``; the REST call that triggers it to
the run's end for the scheduler), the time some task was running (the union of its task instances' spans in the
metadata database) and the rest, the gaps between tasks (parsing, scheduling, queueing, task start-up outside a
task's own span). Overhead = wall / the same repeat's CLI wall − 1; the table quotes its median, min and max.
Prints one JSON line and writes ``bench/results/pipeline_<preset>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aigc.devtools.airflow_stack import DAG_ID, STAGE_DAG_IDS, AirflowStack
from aigc.devtools.demo import run_dag_test
from bench.provenance import write_results

HERE = Path(__file__).resolve().parent

AIGC = [sys.executable, "-m", "aigc", "--log-level", "WARNING"]
CHAIN = (["make-raw"], ["prepare"], ["train"], ["deploy"], ["generate", "--demo-prompts", "--model-ref", "candidate"],
         ["evaluate"])
MODES = ("cli", "dags-test", "scheduler")


def cli_chain(lake: Path, date: str, preset: str) -> dict:
    """The chain by hand; per-command wall times."""
    steps, started = {}, time.perf_counter()
    for command in CHAIN:
        t0 = time.perf_counter()
        out = subprocess.run([*AIGC, *command, "--preset", preset, "--lake", str(lake), "--date", date],
                             capture_output=True, text=True, env={**os.environ, "AIGC_PROGRESS": "0"})
        if out.returncode:
            sys.exit(f"aigc {command[0]} failed for {date}: {out.stderr[-3000:]}")
        steps[command[0]] = round(time.perf_counter() - t0, 2)
    return {"wall_s": time.perf_counter() - started, "steps_s": steps}


def _when(value: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def task_spans(db: Path, run_id: str) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """(task, start, end) of every task instance of the run that ran, from the metadata database (SQLite)."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT task_id, map_index, start_date, end_date FROM task_instance "
                                  "WHERE dag_id = ? AND run_id = ? AND start_date IS NOT NULL AND end_date IS NOT NULL",
                                  (DAG_ID, run_id)).fetchall()
    return [(f"{t}[{i}]" if i >= 0 else t, _when(s), _when(e)) for t, i, s, e in rows]


def busy_seconds(spans) -> float:
    """The time at least one task was running: the union of the spans (mapped tasks may overlap)."""
    total, end = 0.0, None
    for _, start, stop in sorted(spans, key=lambda s: s[1]):
        if end is None or start > end:
            total += (stop - start).total_seconds()
            end = stop
        elif stop > end:
            total += (stop - end).total_seconds()
            end = stop
    return total


def split(wall_s: float, spans) -> dict:
    busy = busy_seconds(spans)
    slowest = sorted(spans, key=lambda s: s[2] - s[1], reverse=True)[:3]
    return {"wall_s": wall_s, "tasks": len(spans), "busy_s": busy, "gaps_s": wall_s - busy,
            "longest_tasks_s": {name: round((end - start).total_seconds(), 1) for name, start, end in slowest}}


def dags_test(home_env: dict, lake: Path, date: str, preset: str, log: Path) -> dict:
    env = {**home_env, "AIGC_LAKE_URI": str(lake)}
    with open(os.devnull, "w") as quiet:
        started = time.perf_counter()
        code = run_dag_test(date, {"preset": preset}, env, log, out=quiet, timeout_s=1800)
        wall = time.perf_counter() - started
    if code or "state=failed" in log.read_text():
        sys.exit(f"airflow dags test failed for {date}; its log: {log}")
    db = Path(home_env["AIRFLOW_HOME"]) / "airflow.db"
    with sqlite3.connect(db) as connection:
        run_id = connection.execute("SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1",
                                    (DAG_ID,)).fetchone()[0]
    return split(wall, task_spans(db, run_id))


def scheduled(stack: AirflowStack, lake: Path, date: str, preset: str) -> dict:
    for item in lake.iterdir():  # the deployment's one lake, emptied: each repeat starts from nothing, as the others
        shutil.rmtree(item) if item.is_dir() else item.unlink()
    started = dt.datetime.now(dt.UTC)
    run_id = stack.trigger({"preset": preset}, f"{date}T00:00:00+00:00")
    state = stack.wait_for_runs([run_id], timeout=1800)[run_id]
    if state != "success":
        sys.exit(f"the scheduled run {run_id} ended {state}; logs under {stack.home / 'logs'}")
    run = stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
    wall = (_when(run["end_date"]) - started).total_seconds()
    return split(wall, task_spans(stack.home / "airflow.db", run_id))


def start_deployment(base: Path, lake: Path) -> AirflowStack:
    """A LocalExecutor deployment on SQLite with the nightly stage DAGs paused and their start-up runs failed,
    so that nothing but the measured runs works."""
    stack = AirflowStack("pipeline-bench", home=base / "scheduler-home", lake_uri=str(lake)).start()
    for dag_id in STAGE_DAG_IDS:
        stack.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": True})
        for run in stack.runs(dag_id):
            if run["state"] in ("queued", "running"):
                stack.api("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}", {"state": "failed"})
    return stack


def airflow_home(base: Path) -> dict:
    """An Airflow home of its own for ``dags test``, migrated; the deployment's settings (``AirflowStack.env``:
    this repo's DAGs and plugins, LocalExecutor, SQLite), no component started."""
    home = AirflowStack("pipeline-bench-dags-test", home=base / "dags-test-home", lake_uri="")
    home.home.mkdir(parents=True)
    home.cli("db", "migrate", timeout=600)
    return home.env


def summarise(runs: list[dict], modes: list[str]) -> dict:
    def stats(values):
        return {"median": statistics.median(values), "min_max": [min(values), max(values)], "runs": len(values)}

    out = {mode: {"wall_s": stats([r[mode]["wall_s"] for r in runs])} for mode in modes}
    for mode in modes:
        if mode == "cli":
            continue
        out[mode]["gaps_s"] = stats([r[mode]["gaps_s"] for r in runs])
        out[mode]["busy_s"] = stats([r[mode]["busy_s"] for r in runs])
        if "cli" in modes:
            out[mode]["overhead_vs_cli"] = stats([r[mode]["wall_s"] / r["cli"]["wall_s"] - 1 for r in runs])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smoke", help="smoke (default: about a minute a run) or demo")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES), help=f"a comma-separated subset of {', '.join(MODES)}")
    ap.add_argument("--start", default="2026-10-01", help="the first repeat's date; each repeat the next day")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        ap.error(f"unknown modes {sorted(unknown)}; choose from {MODES}")
    base = Path(tempfile.mkdtemp(prefix="aigc-pipeline-bench-"))
    stack_lake = base / "scheduler-lake"
    stack_lake.mkdir()
    print(f"B7 pipeline, preset {args.preset}, {args.repeats} repeats of {modes}; work under {base}", flush=True)
    home_env = airflow_home(base) if "dags-test" in modes else {}
    stack = start_deployment(base, stack_lake) if "scheduler" in modes else None
    runs = []
    try:
        for i in range(args.repeats):
            date = (dt.date.fromisoformat(args.start) + dt.timedelta(days=i)).isoformat()
            run = {"date": date}
            for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
                if mode == "cli":
                    run[mode] = cli_chain(base / f"cli-lake-{i}", date, args.preset)
                elif mode == "dags-test":
                    run[mode] = dags_test(home_env, base / f"dags-test-lake-{i}", date, args.preset,
                                          base / f"dags-test-{date}.log")
                else:
                    run[mode] = scheduled(stack, stack_lake, date, args.preset)
                print(f"  {date} {mode:<10} {run[mode]['wall_s']:6.1f} s"
                      + (f" (tasks busy {run[mode]['busy_s']:.1f} s, gaps {run[mode]['gaps_s']:.1f} s)"
                         if "busy_s" in run[mode] else ""), flush=True)
            runs.append(run)
    finally:
        if stack:
            stack.stop()
    result = {"preset": args.preset, "repeats": args.repeats, "modes": modes, "summary": summarise(runs, modes),
              "runs": runs, "goal": {"demo_wall_s": 300, "overhead": 0.15}}
    (HERE / "results").mkdir(exist_ok=True)
    write_results(HERE / "results" / f"pipeline_{args.preset}.json", result)
    shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"preset": args.preset, **{m: {k: round(v["median"], 3) for k, v in s.items()}
                                                for m, s in result["summary"].items()}}))


if __name__ == "__main__":
    main()
