"""Task processes are forked from processes that imported the heavy modules once (plugins/aigc_airflow/preload.py):
the LocalExecutor's workers, from a forkserver; the Celery workers' pools. B7 (docs/benchmarks.md) measures the
pipeline under Airflow."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import yaml

from aigc.devtools.airflow_stack import AirflowStack
from aigc_airflow.operations import CELERY_TASK_PRELOAD, TASK_PRELOAD

ROOT = Path(__file__).resolve().parents[2]


def lazy_imports(path: Path) -> set[str]:
    """The aigc modules a file imports inside its functions: what the tasks import when they run."""
    tree = ast.parse(path.read_text())
    return {node.module for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
            for node in ast.walk(fn) if isinstance(node, ast.ImportFrom) and node.module.startswith("aigc.")}


def lazy_stage_imports() -> set[str]:
    """aigc.stages' lazy imports, and the built-in workloads' hooks' (the deployment allows them by default)."""
    workloads = ROOT / "include" / "aigc" / "workloads"
    return (lazy_imports(ROOT / "include" / "aigc" / "stages.py") | lazy_imports(workloads / "image" / "__init__.py")
            | lazy_imports(workloads / "text" / "__init__.py"))


def test_every_deployment_takes_the_airflow_settings_from_the_one_module_that_defines_them():
    """plugins/aigc_airflow/operations.py defines them; its env files are what it gives (rewrite them with `python
    plugins/aigc_airflow/operations.py`); make exports the LocalExecutor's (a value in the environment wins), compose
    reads the Celery one's, and the test stacks load them."""
    from aigc_airflow.operations import DEPLOY, ENV_FILES, env_file, environment

    for executor, name in ENV_FILES.items():
        assert (DEPLOY / name).read_text() == env_file(executor), f"deploy/{name} is stale: rewrite it"
    assert set(TASK_PRELOAD.items()) <= set(environment("LocalExecutor").items())
    assert set(CELERY_TASK_PRELOAD.items()) <= set(environment("CeleryExecutor").items())
    make = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "--eval", "show:\n\t@env", "show"],
                          cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "60"}).stdout
    exported = dict(line.split("=", 1) for line in make.splitlines() if "=" in line)
    assert {k: exported[k] for k in environment("LocalExecutor")} == {
        **environment("LocalExecutor"), "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "60"}  # the environment's wins


def test_every_local_executor_deployment_preloads_the_same_modules():
    env = AirflowStack("preload-check", home=ROOT / "unused", lake_uri="").env
    assert {k: env[k] for k in TASK_PRELOAD} == TASK_PRELOAD
    assert TASK_PRELOAD["AIRFLOW__CORE__MP_FORKSERVER_PRELOAD"].split(",")[-1] == "aigc_airflow.preload"
    celery = AirflowStack("preload-check", home=ROOT / "unused", lake_uri="", executor="CeleryExecutor").env
    assert not set(TASK_PRELOAD) & set(celery)  # its scheduler would only preload the pool that sends tasks
    assert {k: celery[k] for k in CELERY_TASK_PRELOAD} == CELERY_TASK_PRELOAD
    assert yaml.safe_load((ROOT / "docker-compose.yaml").read_text())["x-airflow-common"]["env_file"] == \
        "deploy/airflow-celery.env"


def test_the_celery_configuration_is_airflows_own_and_preloads_in_the_worker_before_its_pool_forks():
    """Airflow treats the default configuration object as unset (its team-aware configuration stays); the
    handler is connected to worker_init, which Celery sends before it starts the pool."""
    import importlib

    from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
    from celery.signals import worker_init

    module, _, name = CELERY_TASK_PRELOAD["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"].rpartition(".")
    module = importlib.import_module(module)
    assert getattr(module, name) is DEFAULT_CELERY_CONFIG
    assert module.preload_task_imports in [ref() for _, ref in worker_init.receivers]


def test_the_preload_imports_what_every_stage_imports_and_starts_no_thread():
    """A module the stages import but the preload misses is imported again in every task process; a thread
    started at import would not survive the fork into each worker and task."""
    wanted = sorted(lazy_stage_imports())
    assert "aigc.quality.curated" in wanted and "aigc.train.launch" in wanted  # the parse found them
    assert "aigc.workloads.image.evaluation" in wanted and "aigc.workloads.text.serving" in wanted
    probe = ("import sys, threading; import aigc_airflow.preload; "
             f"missing = [m for m in {[*wanted, 'torch', 'great_expectations']!r} if m not in sys.modules]; "
             "print(missing, threading.active_count())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True,
                         env={"PYTHONPATH": str(ROOT / "plugins"), "PATH": "/usr/bin:/bin", "HOME": "/tmp",
                              "GX_ANALYTICS_ENABLED": "False"})
    assert out.stdout.strip().splitlines()[-1] == "[] 1"
