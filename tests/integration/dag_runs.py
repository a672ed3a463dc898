"""`airflow dags test` for every DAG run of a test session, in one long-lived process.

Each `airflow dags test` process spends some 25-30 s on this project's 2-core hosts before and after its run:
importing Airflow and the CLI, the first task's imports (PyTorch, Great Expectations, the stages), building the
in-process execution API, and interpreter shutdown (measured with py-spy on `aigc_prepare`, 2026-12-06). The
server here pays that once: it runs the very command `airflow dags test` runs (the CLI's own parser and
``dags test`` function, ``aigc.devtools.demo.dags_test_argv``) once per request, with the request's environment
and the run's output in the request's log file, as a separate process would write it.

It serves one Airflow home (one metadata DB: the settings Airflow reads once at import stay the server's); a
request's other variables (the lake, the deployment's limits, connections) are read by the tasks as they run.
``python -m tests.integration.dag_runs`` is the server (requests on stdin, replies on stdout, JSON lines).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import BinaryIO, TextIO

from aigc.devtools.demo import Console, dags_test_argv, run_env

ROOT = Path(__file__).resolve().parents[2]


class DagRuns:
    """The client: ``run(...)`` as ``aigc.devtools.demo.run_dag_test`` (the log file, the console's lines), against
    a server for ``env``'s Airflow home, started at the first run and again after a run it was killed for."""

    def __init__(self, env: dict, artifacts: Path):
        self.env, self.artifacts = env, artifacts
        self.proc: subprocess.Popen | None = None
        self.server_log: Path | None = None

    def run(self, date: str, conf: dict, env: dict, log: Path, out: TextIO, timeout_s: float = 600,
            dag_id: str = "aigc_pipeline") -> int:
        env = run_env(conf, env)
        if env["AIRFLOW_HOME"] != self.env["AIRFLOW_HOME"]:
            raise ValueError(f"this server runs DAGs of {self.env['AIRFLOW_HOME']}, not {env['AIRFLOW_HOME']}")
        console = Console(out)
        console.say(f"{dag_id} for {date} on {env.get('AIGC_LAKE_URI')} (full task log: {log})")
        log.write_text("")
        proc = self._server()
        # The one DAG file parsed, not the folder (-f): the other DAGs' parse is seconds a run that nothing reads.
        argv = [*dags_test_argv(dag_id, date, conf), "-f", str(ROOT / "dags" / f"{dag_id}.py")]
        proc.stdin.write(json.dumps({"argv": argv, "env": env, "log": str(log)}) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        with log.open("rb") as lines:
            while not select.select([proc.stdout], [], [], 0.5)[0]:
                _feed(lines, console)
                if time.monotonic() > deadline:
                    self.close()  # the next run starts a new server
                    console.say(f"the DAG run did not end within {timeout_s:.0f} s; its server was stopped")
                    return -9
            reply = proc.stdout.readline()
            _feed(lines, console)
        if not reply:  # the server died during the run: no reply, only its end of the pipe
            self.close()
            console.say(f"the DAG runs' server died during the run; its own log: {self.server_log}")
            return -9
        rc = json.loads(reply)["rc"]
        console.say(f"the DAG run {'succeeded' if rc == 0 else 'FAILED'}")
        return rc

    def _server(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.artifacts.mkdir(exist_ok=True)
            self.server_log = self.artifacts / f"dag-runs-server-{os.getpid()}-{time.monotonic_ns()}.log"
            stderr = self.server_log.open("w")
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.dag_runs"], cwd=ROOT, env=self.env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
            stderr.close()
        return self.proc

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _feed(lines: BinaryIO, console: Console) -> None:
    """The complete lines the run has written since the last call, to the console."""
    while True:
        start = lines.tell()
        line = lines.readline()
        if not line.endswith(b"\n"):
            lines.seek(start)  # a half-written line: read again whole next time
            return
        console.feed(line.decode(errors="replace"))


def serve(requests: TextIO, replies: TextIO) -> None:
    from airflow.cli import cli_parser

    parser = cli_parser.get_parser()
    for request in map(json.loads, requests):
        replies.write(json.dumps({"rc": run_one(parser, request)}) + "\n")
        replies.flush()


def run_one(parser, request: dict) -> int:
    """`airflow <argv>` with the request's environment, its standard output and error appended to its log."""
    os.environ.clear()
    os.environ.update(request["env"])
    sys.stdout.flush()
    sys.stderr.flush()
    kept = os.dup(1), os.dup(2)
    with open(request["log"], "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            args = parser.parse_args(request["argv"])
            args.func(args)
            rc = 0
        except SystemExit as e:  # the CLI's way to fail: `dags test` raises SystemExit("DagRun failed")
            rc = e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, int | None):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - what a separate process would print as it died
            traceback.print_exc()
            rc = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(kept[0], 1)
            os.dup2(kept[1], 2)
            os.close(kept[0])
            os.close(kept[1])
    return rc


if __name__ == "__main__":
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything printed between runs goes to the server's log, not into the replies
    serve(sys.stdin, replies)
    # No interpreter shutdown (seconds, with PyTorch and Great Expectations loaded): every run's log is closed.
    os._exit(0)
