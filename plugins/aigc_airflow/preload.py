"""What a task process would otherwise import from scratch, imported once by the LocalExecutor's forkserver.

Under the real scheduler every task instance is a process of its own, forked by a LocalExecutor worker. With
``[scheduler] mp_start_method = forkserver`` and ``[core] mp_forkserver_preload`` naming this module (the
deployments set both: ``Makefile``, ``docker-compose.yaml``, ``aigc.devtools.airflow_stack``), the workers come
from a server that has already imported the task runner, the DAG files' imports, PyTorch, pandas, pyarrow, Great
Expectations and the stages' modules, and each task process inherits them copy-on-write instead of spending
seconds importing them again (B7 in the README measures it). Nothing here runs work, opens a connection or starts
a thread: forking after this import is safe.
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

import aigc.evaluate.run
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
