"""How this project's Airflow deployments run: how long tasks may run and wait, the date lease derived from them,
and the Airflow settings every deployment sets (``environment``).

A DAG run renews its lease on a date when each task that writes starts, so the lease must outlive the
longest stretch between two renewals: the longest task, plus the longest a task can wait in the queue for
a worker, plus the longest retry delay. (A task waiting for a slot of the `gpu` pool is *scheduled*, not
queued, and Airflow bounds that wait nowhere: a backlog longer than the lease costs the run its date, and
it then fails at its next task before writing.) The durations are plain timedeltas: the DAG files read them at
parse time.

The deployments (``make airflow`` and ``make demo``, docker-compose, the test and bench stacks) take the Airflow
settings from one place: ``environment(executor)``, written by ``python plugins/aigc_airflow/operations.py`` to
``deploy/airflow-<local|celery>.env``, which the Makefile exports, docker-compose's ``env_file`` reads and
``aigc.devtools.airflow_stack`` loads (a test fails when a file differs from what this module gives).
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

DEFAULT_TASK_TIMEOUT = dt.timedelta(hours=1)
"""execution_timeout of every task not named in TASK_TIMEOUTS (gates, publishes, planning: minutes)."""
TASK_TIMEOUTS = {
    "train": dt.timedelta(hours=8),
    "train_node": dt.timedelta(hours=8),
    "generate_shard": dt.timedelta(hours=2),
    "evaluate": dt.timedelta(hours=3),
    "time_on_gpu": dt.timedelta(hours=1),
    "build_variants": dt.timedelta(hours=2),
    "prepare_part": dt.timedelta(hours=4),
    "merge_parts": dt.timedelta(hours=4),
}
"""execution_timeout by task id: the stages' heavy work."""
TASK_QUEUED_TIMEOUT = dt.timedelta(hours=2)
"""Airflow's [scheduler] task_queued_timeout (its default of 10 minutes fails a GPU task that waits its turn
behind another run's training): the deployment sets AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT to this."""
TASK_PRELOAD = {
    "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
    "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD": "airflow,airflow.executors.local_executor,aigc_airflow.preload",
}
"""The LocalExecutor deployments' settings (``make airflow``, the test and bench deployments): the scheduler's
workers come from a forkserver that imported ``aigc_airflow.preload`` (PyTorch, Great Expectations, the stages),
so the task processes they fork start with those imported instead of importing them again, seconds a task."""
CELERY_TASK_PRELOAD = {"AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "aigc_airflow.celery_config.CELERY_CONFIG"}
"""The same for CeleryExecutor deployments (docker-compose, the distributed mode): each ``airflow celery worker``
imports ``aigc_airflow.preload`` before it forks its pool, whose processes fork the task processes."""
ASSET_MANAGER = {"AIRFLOW__CORE__ASSET_MANAGER_CLASS": "aigc_airflow.asset_manager.EveryEventAssetManager"}
"""Every deployment's (``make airflow``, docker-compose, the test and bench deployments): Airflow 3.3's asset queue
lets a second event of one asset that comes before the scheduler's next loop wait for a third; this manager has
the next run consume it (plugins/aigc_airflow/asset_manager.py), so no stage of the nightly chain waits in vain."""
MAX_RETRY_DELAY = dt.timedelta(minutes=15)
"""The DAGs' max_retry_delay (exponential back-off stops growing here)."""
LEASE_MARGIN = dt.timedelta(minutes=30)


def task_timeout(task_id: str) -> dt.timedelta:
    return TASK_TIMEOUTS.get(task_id, DEFAULT_TASK_TIMEOUT)


DATE_LEASE_TTL = max(TASK_TIMEOUTS.values()) + TASK_QUEUED_TIMEOUT + MAX_RETRY_DELAY + LEASE_MARGIN
"""How long a DAG run holds a date between renewals: the longest task, its longest wait in the queue and its longest
retry delay, so a live run never loses its date; a run that died without releasing blocks the date this long at
most (10 h 45 min)."""

ENV_FILES = {"LocalExecutor": "airflow-local.env", "CeleryExecutor": "airflow-celery.env"}
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
"""Where the env files live: the repository's deploy/ folder."""


def environment(executor: str) -> dict[str, str]:
    """The Airflow settings every deployment of this project with ``executor`` sets (environment variables)."""
    if executor not in ENV_FILES:
        raise ValueError(f"no deployment settings for executor {executor!r}; known: {sorted(ENV_FILES)}")
    preload = TASK_PRELOAD if executor == "LocalExecutor" else CELERY_TASK_PRELOAD
    return {"AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": str(int(TASK_QUEUED_TIMEOUT.total_seconds())),
            **preload, **ASSET_MANAGER}


def env_file(executor: str) -> str:
    """``environment(executor)`` as an env file (``KEY=value`` lines: make, docker-compose and Python read it)."""
    return (f"# {executor} deployments' Airflow settings: written by `python plugins/aigc_airflow/operations.py` "
            "from that module; do not edit here.\n" + "".join(f"{k}={v}\n" for k, v in environment(executor).items()))


if __name__ == "__main__":  # rewrite the env files after a change above
    for executor, name in ENV_FILES.items():
        (DEPLOY / name).write_text(env_file(executor))
        print(f"wrote {DEPLOY / name}", file=sys.stderr)
