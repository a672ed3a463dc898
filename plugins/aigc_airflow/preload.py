"""What a task process would otherwise import from scratch, imported once by the process that forks it.

Under the real scheduler every task instance is a process of its own. LocalExecutor: with ``[scheduler]
mp_start_method = forkserver`` and ``[core] mp_forkserver_preload`` naming this module (``TASK_PRELOAD`` in
``aigc_airflow.operations``: the Makefile and ``aigc.devtools.airflow_stack`` set it), the workers that fork the
tasks come from a server that imported it. CeleryExecutor: each worker imports it before it forks its pool
(``aigc_airflow.celery_config``, set by docker-compose). Either way a task process inherits the task runner, the
DAG files' imports, PyTorch, Great Expectations and the stages' modules copy-on-write instead of spending seconds
importing them again (B7 in docs/benchmarks.md measures the pipeline under Airflow). Nothing here runs work,
opens a connection or starts a thread: forking after this import is safe.
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # as aigc.quality.gate sets it: no network calls
# Under Airflow's logging set-up GX's import logs some 150 lines of "Skipping registering function" at INFO.
logging.getLogger("great_expectations._docs_decorators").setLevel(logging.WARNING)

# ruff: noqa: E402, F401 - imported for their side effect: being in sys.modules when a task process forks
import airflow.sdk.execution_time.task_runner  # what every task process runs first
import great_expectations  # the gates' (≈3-4 s on its own)
import great_expectations.expectations
import torch  # training, deployment, generation (≈2 s)

import aigc.evaluate.labelstudio
import aigc.generate.run
import aigc.lake.lease
import aigc.prepare.fanout
import aigc.quality.curated
import aigc.quality.deploy
import aigc.quality.evaluation
import aigc.quality.gate
import aigc.quality.generation
import aigc.quality.training
import aigc.registry.deploy
import aigc.train.launch
import aigc.workloads
import aigc_airflow.stage_tasks  # the DAG files' own imports: parsing a DAG file in a task is then quick


def _preload_workloads() -> None:
    """What the workloads this deployment allows import when their hooks run (``Workload.preload_modules``); one
    that cannot be imported here is left to fail in its task, with the reason, as it would without the preload."""
    import importlib

    from aigc_airflow.runtime import access_policy

    for name in access_policy().workloads or aigc.workloads.BUILT_IN:
        try:
            for module in aigc.workloads.load_workload(name).preload_modules:
                importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - a preload must not stop the scheduler or a Celery worker
            logging.getLogger(__name__).warning("workload %s not preloaded: %s", name, e)


_preload_workloads()
