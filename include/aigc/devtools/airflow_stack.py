"""A real Airflow deployment on loopback, for the end-to-end tests and the pipeline bench: its own home, database
and ports.

``AirflowStack`` starts the components a deployment runs (api-server, scheduler,
dag-processor, triggerer, and Celery workers when the executor is Celery) as separate
processes, talks to them only as a user would (the REST API with a token from
``/auth/token``, the ``airflow`` CLI), and stops them, process groups and all. Each
component's output is kept under ``test-artifacts/e2e/<stack>/`` for whoever debugs a failure.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: its dags/ and plugins/ are what the deployment runs
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
ARTIFACTS = ROOT / "test-artifacts" / "e2e"
DAG_ID = "aigc_pipeline"
STAGE_DAG_IDS = ("aigc_prepare", "aigc_train", "aigc_deploy", "aigc_generate", "aigc_evaluate")
DAG_IDS = (DAG_ID, *STAGE_DAG_IDS)
USER = "admin"
USERS = {USER: "admin", "reader": "viewer", "outsider": ""}
"""The deployment's users and their roles (simple auth manager): ``outsider`` logs in and is granted nothing."""
SQLITE_CONNECT_ARGS = "aigc_airflow.sqlite.CONNECT_ARGS"  # a lock waits a minute, not 5 s (see that module)
HTTP_TIMEOUT = 150
"""Seconds a request may take: longer than the SQLite lock wait above (60 s), or a request that the api-server
would have answered after waiting out a busy scheduler is given up on first (seen in CI: ``TimeoutError``)."""

def deployment_settings(executor: str) -> dict[str, str]:
    """The Airflow settings every deployment with ``executor`` sets: ``deploy/airflow-<local|celery>.env``, which
    plugins/aigc_airflow/operations.py writes (read as a file: the core does not import the plugin)."""
    name = {"LocalExecutor": "airflow-local.env", "CeleryExecutor": "airflow-celery.env"}[executor]
    lines = (ROOT / "deploy" / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class AirflowStack:
    name: str
    home: Path
    lake_uri: str
    executor: str = "LocalExecutor"
    extra_env: dict[str, str] = field(default_factory=dict)
    celery_queues: list[str] = field(default_factory=list)  # one Celery worker per entry, e.g. "default", "gpu"
    port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def logs(self) -> Path:
        return ARTIFACTS / self.name

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW", "AIGC_"))}
        env.update({
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": self.executor,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items()),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API_AUTH__JWT_SECRET": f"e2e-{self.name}-{self.port}",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            # The DAG files never change while a test or bench deployment runs: parsed when it starts, not again
            # every 30 s (Airflow's default re-parsed the six files ~70 times in a 6-minute test, a CPU-minute).
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            # As deployed: the scheduler makes scheduled and asset-triggered runs, so aigc_prepare's nightly run
            # of the latest day (and its chain) starts with the deployment.
            "AIGC_LAKE_URI": self.lake_uri,
            "AIGC_DEFAULT_PRESET": "smoke",  # the trigger form's default here; one value is changed in the browser
            # A run waiting for its date asks every 10 s, not 60: a test's second run of a date otherwise idles up
            # to a minute after the first gives the date back.
            "AIGC_LEASE_POKE_S": "10",
            "AIGC_PROMPT_POLL_S": "2",  # a prompt file a test drops is seen in seconds
            "GX_ANALYTICS_ENABLED": "False",
            "NO_PROXY": "127.0.0.1,localhost",
            "PATH": f"{Path(AIRFLOW).parent}:{os.environ.get('PATH', '')}",
        })
        # What every deployment of the executor sets (the queued timeout the date lease was sized for, task
        # processes that start with the heavy imports done, the asset manager), as make and compose set it.
        env.update(deployment_settings(self.executor))
        if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in self.extra_env:  # the default: SQLite in AIRFLOW_HOME
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = SQLITE_CONNECT_ARGS
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"] = SQLITE_CONNECT_ARGS
        env.update(self.extra_env)
        return env

    # -- life cycle ---------------------------------------------------------------------
    def start(self, timeout: float = 240) -> AirflowStack:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.cli("db", "migrate", timeout=600)
        self.cli("pools", "set", "gpu", "1", "GPU slots (one per GPU on the gpu workers)")
        components = {
            "api-server": ["api-server", "--port", str(self.port)],
            "scheduler": ["scheduler"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer"],
        }
        for queue in self.celery_queues:
            components[f"celery-worker-{queue}"] = ["celery", "worker", "--queues", queue, "--concurrency", "2",
                                                    "--celery-hostname", f"{queue}@%h"]
        for component, argv in components.items():
            # A fresh log per deployment: the Celery test counts the tasks each worker received in it.
            out = open(self.logs / f"{component}.log", "wb")  # noqa: SIM115 - owned by the child until stop()
            self.processes[component] = subprocess.Popen([AIRFLOW, *argv], env=self.env, stdout=out,
                                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_until(lambda: self._http("GET", "/api/v2/monitor/health", auth=False) is not None, timeout,
                   "the api-server to answer /api/v2/monitor/health")
        for dag_id in DAG_IDS:
            dag = self.wait_until(lambda d=dag_id: self.api("GET", f"/api/v2/dags/{d}", missing_ok=True), timeout,
                                  f"the dag-processor to parse {dag_id}")
            assert not dag["is_paused"], f"{dag_id} was created paused: the nightly chain would not run"
        return self

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.processes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.processes.clear()

    def assert_alive(self) -> None:
        dead = {c: p.returncode for c, p in self.processes.items() if p.poll() is not None}
        assert not dead, f"components exited: {dead}; logs in {self.logs}"

    # -- as a user ----------------------------------------------------------------------
    def password(self, user: str = USER) -> str:
        generated = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        return generated[user]

    def token(self, user: str = USER) -> str:
        """A token for ``user`` (one of USERS) from the api-server's /auth/token, as an API client gets one."""
        if user == USER and self._token is not None:
            return self._token
        token = self._http("POST", "/auth/token", {"username": user, "password": self.password(user)},
                           auth=False)["access_token"]
        if user == USER:
            self._token = token
        return token

    def api(self, method: str, path: str, body: dict | None = None, missing_ok: bool = False):
        return self._http(method, path, body, missing_ok=missing_ok)

    def get_page(self, path: str, token: str | None = None) -> tuple[int, str]:
        """(status, body) of an HTML page, with this user's token or with ``token`` ('' for none)."""
        token = self.token() if token is None else token
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
                return reply.status, reply.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def cli(self, *args: str, timeout: float = 300) -> str:
        out = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, f"airflow {' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return out.stdout

    def trigger(self, conf: dict, logical_date: str | None, dag_id: str = DAG_ID) -> str:
        """Trigger a DAG through the REST API; the new run's id."""
        run = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": logical_date, "conf": conf})
        return run["dag_run_id"]

    def runs(self, dag_id: str = DAG_ID) -> list[dict]:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=run_after")["dag_runs"]

    def task_instances(self, run_id: str, dag_id: str = DAG_ID) -> list[dict]:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]

    def task_state(self, run_id: str, task_id: str, dag_id: str = DAG_ID) -> str | None:
        """The state of one (unmapped) task of a run."""
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")["state"]

    def wait_for_runs(self, run_ids: list[str], timeout: float = 900, dag_id: str = DAG_ID) -> dict[str, str]:
        """Wait until every run has finished; their final states. A failure message names the failed tasks."""
        def finished():
            self.assert_alive()
            states = {r: self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{r}")["state"] for r in run_ids}
            return states if all(s in ("success", "failed") for s in states.values()) else None

        states = self.wait_until(finished, timeout, f"runs {run_ids} of {dag_id} to finish", interval=2)
        for run_id, state in states.items():
            if state != "success":
                failed = [t["task_id"] for t in self.task_instances(run_id, dag_id) if t["state"] == "failed"]
                print(f"{dag_id} run {run_id}: {state}; failed tasks {failed}; task logs under {self.home / 'logs'}")
        return states

    def wait_for_a_run(self, dag_id: str, matches, what: str, timeout: float = 900, interval: float = 2) -> dict:
        """The first run of ``dag_id`` for which ``matches(run)`` holds, once it has finished (success or not)."""
        def found():
            self.assert_alive()
            # Finished runs only, before ``matches`` sees them: Airflow 3.3's upstreamAssetEvents answers 500 while
            # a run its events created has not started (AssetEventResponse requires that run's start_date).
            done = [r for r in self.runs(dag_id) if r["state"] in ("success", "failed") and matches(r)]
            return done[0] if done else None

        return self.wait_until(found, timeout, what, interval=interval)

    # -- plumbing -----------------------------------------------------------------------
    def _http(self, method, path, body=None, auth=True, missing_ok=False):
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
                return json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as e:
            if missing_ok and e.code == 404:
                return None
            raise AssertionError(f"{method} {path} -> {e.code}: {e.read()[:2000]!r}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if auth:
                raise
            return None  # not up yet

    def wait_until(self, probe, timeout: float, what: str, interval: float = 1.0):
        """``probe()``'s first truthy result, checking that every component is still alive meanwhile. A probe whose
        request timed out counts as "not yet": the deadline, not one slow answer, decides."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result = probe()
            except TimeoutError:
                result = None
            if result:
                return result
            self.assert_alive()
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; logs in {self.logs}")
