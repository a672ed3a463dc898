"""``make demo``: ``airflow dags test aigc_pipeline`` for one date, with its progress on the console.

The full task log goes to a file (``--log``); the console gets one line per task as it starts
and ends (with its state and time), training's progress lines, each gate's verdict and any error,
and then, whether the run passed or failed, ``aigc status`` for the date: what was published,
which gate failed and why, and where the report and gallery are.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+) map_index=(-?\d+)")
_END = re.compile(r"\[DAG TEST\] end task task_id=(\S+) map_index=(-?\d+)")
_STATE = re.compile(r"new_state=(\w+)")
_SHOWN = re.compile(r"aigc\.train\.loop: (step \d+/\d+.*?samples/s)|gate \w+: (?:PASS|FAIL).*?(?=; results|$)"
                    r"|(GateFailed: .*)|(\S*Error: .*)")


class Console:
    """Turns the task log's lines into the few a person watching wants."""

    def __init__(self, out: TextIO):
        self.out, self.started, self.state = out, {}, {}
        self.task: str | None = None

    def say(self, text: str) -> None:
        self.out.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.out.flush()

    def feed(self, line: str) -> None:
        if m := _START.search(line):
            self.task = m.group(1) + (f"[{m.group(2)}]" if m.group(2) != "-1" else "")
            self.started[self.task] = time.monotonic()
            self.say(f"▶ {self.task}")
        elif m := _END.search(line):
            task = m.group(1) + (f"[{m.group(2)}]" if m.group(2) != "-1" else "")
            seconds = time.monotonic() - self.started.get(task, time.monotonic())
            state = self.state.pop(task, "done")
            self.say(f"{'✔' if state == 'success' else '✘' if state == 'failed' else '•'} {task} {state} "
                     f"({seconds:.0f} s)")
        elif (m := _STATE.search(line)) and self.task and m.group(1) != "running":
            self.state[self.task] = m.group(1)
        elif m := _SHOWN.search(line):
            self.say(f"    {(m.group(1) or m.group(0)).strip()[:400]}")


def run_env(conf: dict, env: dict) -> dict:
    """The environment a demo's DAG run gets: whoever runs `make demo WORKLOAD=…` is the operator, so the workload
    is theirs to allow (it becomes the deployment's default)."""
    return {**env, "AIGC_DEFAULT_WORKLOAD": conf["workload"]} if conf.get("workload") else env


def dags_test_argv(dag_id: str, date: str, conf: dict) -> list[str]:
    """`airflow …`'s arguments that run ``dag_id`` for ``date`` with ``conf`` in one process."""
    return ["dags", "test", dag_id, date, "-c", json.dumps(conf)]


def run_dag_test(date: str, conf: dict, env: dict, log: Path, out: TextIO = sys.stdout,
                 timeout_s: float | None = None, dag_id: str = "aigc_pipeline") -> int:
    """Run a DAG (by default every stage's) for ``date`` in one process; every line to ``log``, the telling
    ones to ``out``."""
    airflow = Path(sys.executable).parent / "airflow"
    env = run_env(conf, env)
    console = Console(out)
    console.say(f"{dag_id} for {date} on {env.get('AIGC_LAKE_URI')} (full task log: {log})")
    with log.open("w") as f, subprocess.Popen([str(airflow), *dags_test_argv(dag_id, date, conf)], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                              errors="replace") as proc:
        watchdog = threading.Timer(timeout_s, proc.kill) if timeout_s else None
        if watchdog:
            watchdog.start()
        try:
            for line in proc.stdout:
                f.write(line)
                console.feed(line)
        finally:
            if watchdog:
                watchdog.cancel()
    console.say(f"the DAG run {'succeeded' if proc.returncode == 0 else 'FAILED'}; what the lake holds now:")
    return proc.returncode


def base_model_location(value: str) -> str:
    """A folder as the absolute path a trigger must give (a worker's working folder is nobody's choice); a URI as
    it is."""
    return value if "://" in value else str(Path(value).expanduser().resolve())


def status(date: str, env: dict, workload: str) -> int:
    return subprocess.run([str(Path(sys.executable).parent / "aigc"), "status", "--date", date, "--workload", workload],
                          env=env).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--date", required=True)
    ap.add_argument("--log", type=Path, required=True, help="the full task log")
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--workload", required=True, help="image or text (the Makefile's WORKLOAD), or any workload's name")
    ap.add_argument("--base-model", default="", help="the hf-causal-lm or hf-diffusion workload's base: a "
                                                     "save_pretrained folder or lake URI (the Makefile's HF_MODEL); "
                                                     "empty: its demo base")
    args = ap.parse_args()
    env = dict(os.environ)
    conf = {"preset": args.preset, "workload": args.workload}
    if args.base_model:
        conf["settings"] = {"base_model_uri": base_model_location(args.base_model)}
        # Whoever runs `make demo HF_MODEL=…` is the operator: the folder is theirs to allow (AIGC_ALLOWED_ROOTS).
        env["AIGC_ALLOWED_ROOTS"] = ",".join(filter(None, [env.get("AIGC_ALLOWED_ROOTS"),
                                                            conf["settings"]["base_model_uri"]]))
    code = run_dag_test(args.date, conf, env, args.log)
    status(args.date, env, args.workload)  # the summary, on failure too: which gate failed and where its report is
    if code:
        print(f"demo failed: the lines above say which task and gate; full log in {args.log}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
